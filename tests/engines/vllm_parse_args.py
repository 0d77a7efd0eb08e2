"""Run by the cached vLLM venv's python: parse a `vllm serve ...` argv with vLLM's own parser.

Builds the `vllm` CLI's parser exactly as `vllm serve` does (FlexibleArgumentParser plus the serve
subcommand's make_arg_parser), runs the subcommand's validation and turns the namespace into
EngineArgs. Input: a JSON list of argvs; output: a JSON list, per argv the fields the tests compare,
or {"error": ...} when vLLM rejected it (argparse exits, validation raises).
"""

import contextlib
import io
import json
import sys

from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

FIELDS = (
    "model", "served_model_name", "host", "port", "tensor_parallel_size", "max_model_len",
    "gpu_memory_utilization", "kv_cache_memory_bytes", "num_gpu_blocks_override", "enable_expert_parallel",
    "enable_eplb", "eplb_config", "enforce_eager", "max_num_seqs",
)  # fmt: skip


def parse(argv: list[str]) -> dict[str, object]:
    assert argv[:2] == ["vllm", "serve"], argv[:2]
    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    serve.subparser_init(parser.add_subparsers(dest="subparser"))
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(argv[1:])
        serve.validate(args)
    except SystemExit:
        return {"error": errors.getvalue().strip().splitlines()[-1]}
    except (ValueError, TypeError) as e:
        return {"error": str(e)}
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    engine = EngineArgs.from_cli_args(args)
    out: dict[str, object] = {}
    for name in FIELDS:
        value = getattr(engine, name, getattr(args, name, None))
        out[name] = value if isinstance(value, (str, int, float, bool, list, type(None))) else repr(value)
    return out


print(json.dumps([parse(argv) for argv in json.loads(sys.argv[1])]))
