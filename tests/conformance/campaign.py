"""Runs scenarios engine by engine, starting each engine configuration once.

A case needs the baseline and the speculative run of its scenario. The first time a
(configuration, family, method) is needed, its engine is started, runs every scenario that
uses it, and is stopped; later cases read the cached runs. So each engine configuration starts
once per method, whatever order pytest runs the cases in.
"""

from __future__ import annotations

from blockdraft.verdict import FloatReference, reference_for

from .compare import COST_AWARE_LOG, CaseResult, Run, judge
from .drivers.base import BASELINE, FIXTURES, Driver, Method
from .prompts import prompt_set
from .scenarios import SCENARIOS, Scenario


class Campaign:
    def __init__(self, driver: Driver, scenarios: tuple[Scenario, ...] = SCENARIOS) -> None:
        self.driver = driver
        self.scenarios = scenarios
        self.runs: dict[tuple[str, str], Run | Exception] = {}
        self.results: list[CaseResult] = []

    def _engine_key(self, scenario: Scenario) -> tuple[str, str]:
        return scenario.config, self.driver.family(scenario)

    def _run(self, scenario: Scenario, method: Method) -> Run:
        key = (scenario.name, method.name)
        if key not in self.runs:
            config, family = self._engine_key(scenario)
            group = [s for s in self.scenarios if self._engine_key(s) == (config, family)
                     and self.driver.unavailable(s, method) is None]
            group.sort(key=lambda s: s.shutdown)  # the scenario that stops the engine comes last
            # failures are recorded per case: a broken engine fails its cases, a run that did not
            # exercise its axis fails its own case only
            try:
                with self.driver.start(config, family, method) as engine:
                    for s in group:
                        want_top2 = (method is BASELINE or s.logprobs) and s.compares_outputs
                        requests = prompt_set(s.prompts)
                        try:
                            cuts = (self.driver.drop_streams(engine, s, requests,
                                                             speculative=method is not BASELINE)
                                    if s.abandoned_streams else [])
                            if s.shutdown:
                                run = self.driver.shut_down_while_streaming(engine, s, requests)
                            else:
                                with engine.peak_rss() as peak:
                                    run = self.driver.run(engine, s, requests, want_top2)
                                run.peak_mb = round(peak.mb)
                                run.cuts = cuts
                                run.chose_lengths = method.cost_aware and COST_AWARE_LOG in \
                                    engine.log_path.read_text(errors="replace")
                                engine.check_healthy(after=s.name)
                        except Exception as exc:
                            run = exc
                        self.runs[(s.name, method.name)] = run
            except Exception as exc:
                for s in group:
                    self.runs.setdefault((s.name, method.name), exc)
        run = self.runs[key]
        if isinstance(run, Exception):
            raise run
        return run

    def baseline(self, scenario: Scenario) -> Run:
        """The no-speculation run of a scenario (with top-2 log-probs where it compares)."""
        return self._run(scenario, BASELINE)

    def reference(self, scenario: Scenario) -> FloatReference:
        return reference_for(FIXTURES / self.driver.family(scenario) / "target")

    def acceptance_length(self, scenario: Scenario, method: Method) -> float:
        """The engine's acceptance length over the method's run of the scenario."""
        return self._run(scenario, method).counters.acceptance_length

    def case(self, scenario: Scenario, method: Method) -> CaseResult:
        family = self.driver.family(scenario)
        reason = self.driver.unavailable(scenario, method)
        if reason is None:
            reason = self.driver.unavailable(scenario, BASELINE)
        if reason is not None:
            result = CaseResult(self.driver.engine, scenario.name, method.name, family,
                                "not available", reason)
        else:
            try:
                result = judge(self.driver.engine, scenario, method.name, family,
                               self._run(scenario, BASELINE), self._run(scenario, method),
                               # our methods' in-domain floor holds for full drafts; a
                               # cost-aware one drafts shorter where that pays, by design
                               method.max_draft, method.ours and not method.cost_aware,
                               scenario.per_output(prompt_set(scenario.prompts)),
                               lambda: self.reference(scenario), method.cost_aware)
            except Exception as exc:
                result = CaseResult(self.driver.engine, scenario.name, method.name, family, "fail",
                                    f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        self.results.append(result)
        return result
