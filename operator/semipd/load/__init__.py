"""Load generator: replays traces or synthetic arrivals against OpenAI-compatible endpoints.

Python API: `await run_load(schedule, LoadConfig(endpoints=(...,)))` returns a LoadResult whose
`summary(SLO(ttft_s=..., itl_s=...))` gives quantiles, SLO attainment and goodput. CLI: semipd.load.cli.
"""

from semipd.load.prompts import PROMPT_TOKENS_FIELD, completion_body
from semipd.load.runner import LoadConfig, LoadResult, Progress, RemoteEndpointError, check_endpoint, run_load
from semipd.load.stats import SLO, Distribution, RequestResult, Summary, format_summary, summarize

__all__ = [
    "PROMPT_TOKENS_FIELD",
    "SLO",
    "Distribution",
    "LoadConfig",
    "LoadResult",
    "Progress",
    "RemoteEndpointError",
    "RequestResult",
    "Summary",
    "check_endpoint",
    "completion_body",
    "format_summary",
    "run_load",
    "summarize",
]
