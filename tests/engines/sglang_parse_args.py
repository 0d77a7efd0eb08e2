"""Run by the vLLM venv's python with SGLang's unpacked sources first on PYTHONPATH: parse
`python3 -m sglang.launch_server ...` argvs with SGLang's own ServerArgs parser, and load PD-Multiplexing
config files with SGLang's own loader.

`sglang/__init__.py` imports the whole runtime (kernels that need a GPU), so a bare package object
stands in for it; `sglang.srt.server_args` and `sglang.srt.multiplex.pdmux_context` import with
torch alone. Input: JSON {"argvs": [...], "configs": [yaml text, ...]}; output: JSON with, per argv,
the parsed fields the tests compare or {"error": ...}, and per config the loaded PDMuxConfig or error.
"""

import contextlib
import dataclasses
import io
import json
import os
import sys
import tempfile
import types

root = next(p for p in sys.path if os.path.isdir(os.path.join(p, "sglang", "srt")))
package = types.ModuleType("sglang")
package.__path__ = [os.path.join(root, "sglang")]
sys.modules["sglang"] = package

from sglang.srt.multiplex.pdmux_context import load_pdmux_config  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

FIELDS = (
    "model_path", "served_model_name", "host", "port", "tp_size", "pp_size", "context_length",
    "mem_fraction_static", "max_total_tokens", "enable_metrics", "enable_pdmux", "pdmux_config_path",
    "chunked_prefill_size", "disable_overlap_schedule", "disaggregation_mode",
)  # fmt: skip
PREFIX = ["python3", "-m", "sglang.launch_server"]


def parse(argv):
    assert argv[:3] == PREFIX, argv[:3]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = prepare_server_args(argv[3:])
    except SystemExit:
        return {"error": errors.getvalue().strip().splitlines()[-1]}
    return {name: getattr(args, name) for name in FIELDS}


def load(text):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        return dataclasses.asdict(load_pdmux_config(f.name))
    except ValueError as e:
        return {"error": str(e)}
    finally:
        os.unlink(f.name)


request = json.loads(sys.argv[1])
print(json.dumps({"argvs": [parse(a) for a in request["argvs"]], "configs": [load(c) for c in request["configs"]]}))
