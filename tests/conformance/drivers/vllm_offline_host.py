"""Host of vLLM's offline `LLM` for the conformance suite (see offline.py). Runs in the vLLM
environment: `python -m tests.conformance.drivers.vllm_offline_host '<LLM kwargs as JSON>'`.

Each stdin line is one `LLM.generate` call on token prompts; each reply carries the outputs and
how much each of vLLM's counters grew during the call, named as on /metrics."""

from __future__ import annotations

import json
import sys

from tests.conformance.drivers.host_protocol import reply

def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(**json.loads(sys.argv[1]))

    def counters() -> dict[str, float]:
        return {f"{m.name}_total": m.value for m in llm.get_metrics()
                if type(m).__name__ == "Counter"}

    reply({"ready": True})
    for line in sys.stdin:
        call = json.loads(line)
        try:
            before = counters()
            params = SamplingParams(max_tokens=call["max_tokens"], temperature=call["temperature"],
                                    seed=call["seed"], stop=call["stop"] or None,
                                    logprobs=2 if call["top2"] else None)
            results = llm.generate([TokensPrompt(prompt_token_ids=p) for p in call["prompts"]],
                                   params, use_tqdm=False)
            after = counters()
            reply({"outputs": [{
                "token_ids": list(r.outputs[0].token_ids),
                "finish_reason": r.outputs[0].finish_reason or "",
                "top2": ([sorted((lp.logprob for lp in position.values()), reverse=True)[:2]
                          for position in r.outputs[0].logprobs] if call["top2"] else None),
            } for r in results], "grown": {k: after[k] - before.get(k, 0.0) for k in after}})
        except Exception as exc:  # the suite records it as the case's failure
            reply({"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
