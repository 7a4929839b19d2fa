"""make demo's plan and output (sparkbench/demo/): the steps are numbered k/N with one fixed N, each
says what it shows, what it shortened and how long it takes; the plan printed up front adds the
first build of an image a step needs; progress lines come from the facts the playbooks set
(bench_plan, bench_stage), never from task names; a step run beside others prints in its turn;
make demo sets up only what its first step needs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from sparkbench.demo import console, pieces, plan, show
from sparkbench.demo.play import StageLines
from sparkbench.runner.progress import Progress

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.unit


class FixedClock(console.Clock):
    def __init__(self, seconds: float = 65.0) -> None:
        super().__init__(t0=0.0)
        self.seconds = seconds

    def elapsed(self) -> float:
        return self.seconds


def printer(width: int = 300) -> tuple[console.Printer, io.StringIO]:
    buf = io.StringIO()
    return console.Printer(FixedClock(), stream=buf, width=width), buf


def test_a_line_longer_than_the_width_wraps_under_its_own_indent():
    out, buf = printer(width=40)
    out.line("    a table row that fits")
    out.line("  " + "word " * 20)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "    a table row that fits"
    assert all(len(line) <= 40 for line in lines) and len(lines) == 4
    assert lines[1].startswith("  word") and all(line.startswith("    word") for line in lines[2:])
    assert " ".join(line.strip() for line in lines[1:]) == " ".join(["word"] * 20)


def test_steps_are_numbered_with_one_fixed_count_and_say_what_and_how_long():
    n = len(plan.STEPS)
    assert [plan.number(s) for s in plan.STEPS] == [f"{k}/{n}" for k in range(1, n + 1)]
    assert len({s.key for s in plan.STEPS}) == n
    for s in plan.STEPS:
        assert s.title and s.shows and s.shortened and s.estimate_s > 0
        assert set(s.needs) <= set(pieces.PIECES)
    # Step 1 is the article's matrix; what later steps need is built by them, not before step 1.
    assert plan.STEPS[0].key == "matrix" and not plan.STEPS[0].needs and not plan.STEPS[0].beside
    assert {k for s in plan.STEPS for k in s.needs} == {"ray-image", "vllm-cpu-image"}


def test_select_by_number_or_name_keeps_the_demo_order_and_refuses_unknown_steps():
    assert [s.key for s in plan.select(["real", "1"])] == ["matrix", "real"]
    assert [s.key for s in plan.select(None)] == [s.key for s in plan.STEPS]
    with pytest.raises(ValueError, match="unknown step 'x'"):
        plan.select(["x"])


def test_the_plan_gives_each_step_its_estimate_and_the_first_builds(monkeypatch):
    monkeypatch.setattr(plan, "present", lambda image: True)
    lines = plan.plan_lines(list(plan.STEPS), serial=True)
    assert len(lines) == len(plan.STEPS) + 1
    for s, line in zip(plan.STEPS, lines):
        assert f"step {plan.number(s)}" in line and console.minutes(s.estimate_s) in line and "to build" not in line
    assert "in all" in lines[-1]
    monkeypatch.setattr(plan, "present", lambda image: image != pieces.PIECES["vllm-cpu-image"].image)
    real = next(line for line in plan.plan_lines(list(plan.STEPS), serial=True) if "REAL vLLM" in line)
    assert f"to build {pieces.PIECES['vllm-cpu-image'].image} first (once)" in real


def test_progress_lines_come_from_the_plan_and_stage_facts_not_task_names(tmp_path):
    out, buf = printer()
    progress = Progress()
    progress.on_change = StageLines(out, progress, tmp_path, figures=False, host_lines=True)

    def ev(host, facts):
        return {"event": "runner_on_ok", "event_data": {"host": host, "task": "any renamed task",
                                                        "res": {"ansible_facts": facts}}}

    progress.handle(ev("h1", {"bench_plan": {"names": ["a", "b"], "variants": [{"name": "a", "action": "measure"},
                                                                                 {"name": "b", "action": "skip"}]}}))
    progress.handle(ev("h1", {"bench_stage": {"variant": "a", "stage": "launch"}}))
    progress.handle(ev("h1", {"bench_stage": {"variant": "a", "stage": "measure"}}))
    progress.handle(ev("h1", {"bench_stage": {"variant": "a", "stage": "failed", "reason": "launch: boom\nmore"}}))
    lines = buf.getvalue().splitlines()
    assert lines == ["  [ 1:05] h1: planned; provisioning the unit first (Docker, image, model cache, the measurement "
                     "script)",
                     "  [ 1:05] h1 b: done (kept: complete result with the same configuration hash)",
                     "  [ 1:05] h1 a: launching",
                     "  [ 1:05] h1 a: measuring",
                     "  [ 1:05] h1 a: failed — launch: boom"]


def test_a_host_line_can_be_left_out_where_the_last_task_fails_on_purpose(tmp_path):
    out, buf = printer()
    progress = Progress()
    progress.on_change = StageLines(out, progress, tmp_path, figures=False, host_lines=False)
    progress.handle({"event": "runner_on_unreachable", "event_data": {"host": "h1", "res": {"msg": "gone"}}})
    assert buf.getvalue() == ""


def test_a_step_beside_others_prints_in_its_turn():
    buf = io.StringIO()
    live = console.Printer(FixedClock(), stream=buf)
    kept = console.Printer(FixedClock(), stream=buf, buffered=True)
    kept.line("side 1")
    live.line("main")
    assert buf.getvalue() == "main\n"
    kept.go_live()
    kept.line("side 2")
    assert buf.getvalue() == "main\nside 1\nside 2\n"


def test_verdict_lines_print_the_reports_words_and_name_the_metrics_without_a_verdict_once():
    out, buf = printer()
    row = {"host": "h", "model_key": "m", "config": "bare", "build": "unsloth", "reference_build": "nvidia"}
    report = {"head_to_head": {"rows": [
        {**row, "metric": "single", "verdict": {"kind": "differs", "text": "differs by −13.0 % [−14.0, −12.0]"}},
        {**row, "metric": "combined_2", "verdict": {"kind": "not_enough", "text": "not enough requests for a verdict"}},
        {**row, "metric": "combined_8", "verdict": {"kind": "no_difference",
                                                    "text": "no difference detectable above 3.0 %"}}]}}
    show.head_to_head(out, report)
    assert buf.getvalue().splitlines()[-1] == ("    unsloth vs nvidia, bare  single: differs by −13.0 % [−14.0, −12.0] · "
                                               "8×: no difference detectable above 3.0 % · 2×: not enough requests "
                                               "for a verdict")


def test_make_demo_sets_up_only_what_its_first_step_needs():
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    demo = re.search(r"^demo: (.*)$", text, re.M).group(1).split()
    assert demo == ["demo-setup"]
    setup = re.search(r"^demo-setup:.*\n\t(.*)$", text, re.M).group(1)
    assert "venv-runtime" in setup and "sim-images" in setup
    sim_images = re.search(r"^sim-images:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "build_base_image.sh" in sim_images and "build_sim_image.sh" in sim_images
    for later in ("build_sim_ray_image.sh", "build_vllm_cpu_image.sh", "setup_chromium.sh", "ssh"):
        assert later not in setup + sim_images
    # make setup (and so make test) still builds everything.
    assert re.search(r"^setup: .*\bimages\b.*\bchromium\b", text, re.M)
    images = re.search(r"^images: (.*)\n((?:\t.*\n)+)", text, re.M)
    assert "sim-images" in images.group(1) and "build_vllm_cpu_image.sh" in images.group(2)
