"""`python -m semipd.sim.engine ...` (same as `semipd sim-engine ...`)."""

from semipd.sim.engine.cli import main

raise SystemExit(main())
