"""The simulated semi-PD engine: a decode-owner process and prefill-worker processes, timed by the
latency model, with the real engine's API, metric names and process layout."""
