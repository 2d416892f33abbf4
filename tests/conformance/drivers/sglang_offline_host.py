"""Host of SGLang's offline `Engine` for the conformance suite (see offline.py). Runs in the
SGLang environment: `python -m tests.conformance.drivers.sglang_offline_host '<argv as JSON>'`,
where argv is what launch_server would get (the same server arguments, parsed the same way).

Each stdin line holds the keyword arguments of one `Engine.generate` call; each reply carries
its result, shaped as the /generate endpoint's body."""

from __future__ import annotations

import json
import sys

from tests.conformance.drivers.host_protocol import reply

def main() -> None:
    # As sglang_dspark's README says for the offline Engine on CPU: register the plugin before
    # SGLang's engine module imports sgl_kernel (Engine() loads plugins only later).
    from sglang_dspark.plugin import register
    register()
    import sglang
    from sglang.srt.server_args import prepare_server_args

    engine = sglang.Engine(server_args=prepare_server_args(json.loads(sys.argv[1])))
    reply({"ready": True})
    for line in sys.stdin:
        try:
            reply({"result": engine.generate(**json.loads(line))})
        except Exception as exc:  # the suite records it as the case's failure
            reply({"error": f"{type(exc).__name__}: {exc}"})
    engine.shutdown()


if __name__ == "__main__":
    main()
