"""An autotuned kernel is graded at the configuration the judge timed fastest, not the one the run's shared
benchmark picked (grader.judge.config_choice): the recorder keeps one plan per candidate, the builder builds them
all, and the judge chooses among those that pass its checks and return right results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from grader.intake.layout import REPO
from grader.judge import config_choice
from grader.kernel_build import build_kernels

# A notebook's autotuned kernel, recorded on a CPU through Triton's interpreter: the run's own benchmark (which a
# CPU cannot make) is given as it might read beside other runs, BLOCK 32 its fastest.
RECORD = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    from course.recorder import alone, export

    def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2.0, mask=i < n)

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((16, 1), (32, 2), (64, 4))]
    scale = triton.autotune(configs=configs, key=["n"])(triton.jit(_scale))

    def double(x):
        out = torch.empty_like(x)
        scale[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out

    [tuner] = alone.autotuners({"scale": scale})
    tuner.configs_timings = {configs[0]: 3.0, configs[1]: 1.0, configs[2]: 2.0}
    tuner.best_config = configs[1]
    found = export._alternatives(double, (torch.randn(100),), [tuner])
    assert tuner.configs == configs
    json.dump({"plan": found[0]["plan"], "alternatives": found}, sys.stdout)
''')


def _recorded_call() -> dict:
    result = subprocess.run([sys.executable, "-c", RECORD], cwd=REPO, capture_output=True, text=True, check=True,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    return json.loads(result.stdout)


def _block(plan: dict) -> int:
    [launch] = plan["launches"]
    [[_, value]] = launch["constexprs"]
    return value["int"]


def test_the_recorder_keeps_one_plan_per_candidate_and_the_judge_picks_the_fastest_not_the_run_s():
    call = _recorded_call()
    candidates = config_choice.alternatives(call)
    # one plan per configuration, each with its own block, grid and warps; the run's fastest first
    assert [_block(c.plan) for c in candidates] == [32, 64, 16]
    assert [c.plan["launches"][0]["grid"][0] for c in candidates] == [4, 2, 7]
    assert [c.plan["launches"][0]["options"]["num_warps"] for c in candidates] == [2, 4, 1]
    assert [c.run_picked for c in candidates] == [True, False, False]
    # The judge's own timing, alone on the GPU, says BLOCK 64 is fastest: that is the plan graded.
    judged_ms = {16: 3.0, 32: 2.0, 64: 1.0}
    plan, note = config_choice.choose(call, lambda plan: True, lambda plans: [judged_ms[_block(p)] for p in plans])
    assert _block(plan) == 64 and _block(call["plan"]) == 32
    assert note["picked"].startswith("BLOCK: 64") and note["run_picked"].startswith("BLOCK: 32")
    assert note["times_ms"] == [2.0, 1.0, 3.0]
    # and every candidate's kernel is built for the judge, not only the run's pick
    assert len(list(build_kernels.recorded_launches({"kernels": {"w": {"calls": {"bench-0": call}}}}))) == 4


def test_the_builder_takes_every_call_s_own_plan_before_any_alternative():
    def plan(name):
        return {"launches": [{"kernel": name}]}

    calls = {key: {"plan": plan(f"{key} run"), "alternatives": [{"plan": plan(f"{key} alt{i}")} for i in range(3)]}
             for key in ("bench-0", "bench-1")}
    calls["visible-0"] = {"plan": plan("visible-0 run")}
    exported = {"kernels": {"w": {"calls": calls}, "broken": {"error": "no plan", "calls": {}}}}
    order = [launch["kernel"] for launch in build_kernels.recorded_launches(exported)]
    assert order[:3] == ["bench-0 run", "bench-1 run", "visible-0 run"] and len(order) == 9


def test_a_candidate_that_fails_the_checks_or_returns_a_wrong_result_is_never_picked():
    call = {"plan": {"id": "run"}, "alternatives": [
        {"config": "a", "run_picked": True, "plan": {"id": "a"}},
        {"config": "banned", "plan": {"id": "banned"}},
        {"config": "wrong", "plan": {"id": "wrong"}},
        {"config": "b", "plan": {"id": "b"}}]}
    timed = []

    def time_plans(plans):
        timed.extend(p["id"] for p in plans)
        return [{"a": 2.0, "wrong": None, "b": 1.5}[p["id"]] for p in plans]

    plan, note = config_choice.choose(call, lambda p: p["id"] != "banned", time_plans)
    assert plan == {"id": "b"} and timed == ["a", "wrong", "b"]  # the refused one is not even timed
    assert note["times_ms"] == [2.0, None, None, 1.5]
    # no candidate timed: the run's own plan is graded (and is judged like any plan)
    plan, note = config_choice.choose(call, lambda p: False, time_plans)
    assert plan == {"id": "run"} and note["picked"] is None


def test_with_no_choice_to_make_the_run_s_plan_is_graded_and_untrusted_alternatives_are_read_with_care():
    never = lambda *_: (_ for _ in ()).throw(AssertionError("nothing to time"))  # noqa: E731
    assert config_choice.choose({"plan": {"id": "run"}}, never, never) == ({"id": "run"}, None)
    one = {"plan": {"id": "run"}, "alternatives": [{"config": "a", "plan": {"id": "a"}}]}
    assert config_choice.choose(one, never, never) == ({"id": "run"}, None)
    junk = {"plan": {"id": "run"}, "alternatives": ["x", {"plan": "y"}, {"config": 3, "plan": {"id": "z"}}] * 20}
    assert [c.config for c in config_choice.alternatives(junk)] == ["3"] * 5  # of the first ALTERNATIVES (16) entries
    assert config_choice.alternatives({"alternatives": "many"}) == [] and config_choice.alternatives(None) == []
