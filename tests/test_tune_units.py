"""sparkbench tune's parts without a unit: the space read and refused by field, the grid and the
variant of a point, the order the prediction gives, the study that proposes and remembers, the
winner and its verdict against the runner-up (the cheaper of two equals)."""

from __future__ import annotations

import random

import pytest

from sparkbench.errors import InputError
from sparkbench.tune import answer, points, search
from sparkbench.tune.space import Parallel, load_space, objective_name, parse_space

pytestmark = pytest.mark.unit

BASE = {"name": "nvidia-mtp2", "build": "nvidia", "config": "mtp2", "image": "sparkbench/vllm-sim:v0.25.0",
        "args": {"speculative-config": {"method": "mtp", "num_speculative_tokens": 2},
                 "max-num-batched-tokens": 4096, "max-num-seqs": 8},
        "env": {"VLLM_LOGGING_LEVEL": "INFO"}}
SEED_SPACE = {"base": "nvidia-mtp2", "objective": "single", "budget": {"trials": 4},
              "space": {"speculative-config.num_speculative_tokens": [1, 2, 3],
                        "max-num-batched-tokens": [2048, 4096, 8192]}}


def test_the_seeds_space_reads_into_its_model():
    space = parse_space(SEED_SPACE)
    assert space.base == "nvidia-mtp2" and space.budget.trials == 4 and space.budget.minutes is None
    assert space.keys == ["speculative-config.num_speculative_tokens", "max-num-batched-tokens"]
    assert [objective_name(o) for o in space.objectives] == ["single"]
    two = parse_space({**SEED_SPACE, "objective": ["single", {"parallel": 8}]})
    assert [objective_name(o) for o in two.objectives] == ["single", "parallel@8"]
    assert isinstance(two.objectives[1], Parallel)


@pytest.mark.parametrize("change, named", [
    ({"space": {}}, "space: empty"),
    ({"budget": {"trials": 0}}, "budget.trials: Input should be greater than or equal to 1"),
    ({"objective": "fastest"}, "objective: 'fastest' is not an objective; write single, {parallel: N}"),
    ({"objective": {"parallel": 1}}, "objective: {'parallel': 1} is not an objective"),
    ({"space": {"Max_Seqs": [4, 8]}}, "space.Max_Seqs: a key is a vLLM flag without dashes"),
    ({"space": {"max-num-seqs": []}}, "space.max-num-seqs: no values"),
    ({"space": {"max-num-seqs": [4, 4]}}, "space.max-num-seqs: a value is listed twice"),
    ({"space": {"env.9X": ["a"]}}, "space.env.9X: not an environment variable's name"),
    ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
    ({"base": "Nvidia MTP"}, "base: String should match pattern"),
])
def test_a_bad_space_is_refused_naming_the_field(change, named):
    with pytest.raises(InputError, match="SPACE.yml: ") as caught:
        parse_space({**SEED_SPACE, **change})
    assert named in str(caught.value)


def test_a_space_file_that_is_missing_or_not_yaml_is_named(tmp_path):
    with pytest.raises(InputError, match="cannot read the tune space"):
        load_space(tmp_path / "nope.yml")
    bad = tmp_path / "space.yml"
    bad.write_text("base: [unclosed\n", encoding="utf-8")
    with pytest.raises(InputError, match="not YAML"):
        load_space(bad)


def test_values_vllm_would_refuse_are_named_before_anything_starts():
    space = parse_space({**SEED_SPACE, "space": {"max-num-seqs": ["many", 8], "max-num-seq": [4, 8],
                                                 "speculative-config.num_speculative_tokens": [1, 2]}})
    problems = points.value_problems(space, BASE, "0.25.0")
    assert any(p.startswith("space.max-num-seqs: --max-num-seqs must be an integer, got 'many'") for p in problems)
    assert any(p.startswith("space.max-num-seq: --max-num-seq is not a vLLM flag") and "use --max-num-seqs" in p
               for p in problems)
    assert not any(p.startswith("space.speculative-config") for p in problems), problems


def test_the_grid_names_every_point_the_same_way_each_time():
    space = parse_space(SEED_SPACE)
    grid = points.grid(space)
    assert len(grid) == 9 and [p["name"] for p in grid[:2]] == ["nvidia-mtp2.p00", "nvidia-mtp2.p01"]
    assert grid[5]["values"] == {"speculative-config.num_speculative_tokens": 2, "max-num-batched-tokens": 8192}
    assert points.grid(space) == grid
    assert points.point_name("b", 7, 120) == "b.p007"


def test_a_points_variant_is_the_base_with_its_values_set():
    space = parse_space({**SEED_SPACE, "space": {**SEED_SPACE["space"], "env.VLLM_LOGGING_LEVEL": ["DEBUG", None],
                                                 "max-num-seqs": [None]}})
    p = next(x for x in points.grid(space) if x["values"]["speculative-config.num_speculative_tokens"] == 3
             and x["values"]["env.VLLM_LOGGING_LEVEL"] is None)
    entry = points.point_variant(p, BASE)
    assert entry["name"] == p["name"] and entry["build"] == "nvidia" and entry["config"] == "mtp2"
    assert entry["args"]["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert "max-num-seqs" not in entry["args"] and entry["env"] == {}
    assert BASE["args"]["speculative-config"]["num_speculative_tokens"] == 2  # the base is untouched
    with pytest.raises(InputError, match="not a JSON object"):
        points.with_values({"speculative-config": "ngram"}, {}, {"speculative-config.num_speculative_tokens": 2})


def test_the_prediction_orders_the_points_and_the_first_batch_follows_it():
    space = parse_space(SEED_SPACE)
    grid = points.grid(space)
    spec = "speculative-config.num_speculative_tokens"
    ranked = search.predicted_order(grid, lambda p: None if p["values"][spec] == 1 else 50.0 + 10 * p["values"][spec])
    assert [p["values"][spec] for p in ranked] == [3, 3, 3, 2, 2, 2, 1, 1, 1]
    assert [p["index"] for p in ranked[:3]] == [6, 7, 8]  # equal predictions keep the grid's order
    assert search.first_batch(grid[:4], ranked, 4) == grid[:4]  # the budget covers them: a grid
    assert search.first_batch(grid, ranked, 4) == ranked[:2]
    assert search.first_batch(grid, ranked, 7) == ranked[:4]


def test_the_study_lives_in_the_run_folder_and_remembers_what_it_was_told(tmp_path):
    space = parse_space(SEED_SPACE)
    grid = points.grid(space)
    study = search.open_study(tmp_path, 1)
    search.tell(study, space, grid[0], [60.0])
    search.tell(study, space, grid[0], [61.0])  # told once
    search.tell(study, space, grid[1], None)
    again = search.open_study(tmp_path, 1)
    assert (tmp_path / search.STUDY_FILE).is_file()
    assert len(search.told(again)) == 2 and again.best_value == 60.0
    measured = {grid[0]["name"], grid[1]["name"]}
    pick = search.propose(again, space, grid, grid, measured)
    assert pick is not None and pick["name"] not in measured
    assert search.propose(again, space, grid[:2], grid[:2], measured) is None


def _trial(name, point, value, status="measured"):
    return {"name": name, "point": point, "status": status, "figures": {"single": value}, "reason": None,
            "predicted_tok_s": None}


def test_the_winner_is_the_best_median_with_its_verdict_against_the_runner_up():
    rng = random.Random(1)
    fast = [100 * (1 + rng.gauss(0, 0.01)) for _ in range(9)]
    slow = [90 * (1 + rng.gauss(0, 0.01)) for _ in range(9)]
    trials = [_trial("b.p00", {"n": 1}, 90.0), _trial("b.p01", {"n": 2}, 100.0), _trial("b.p02", {"n": 3}, None,
                                                                                            "pruned")]
    best, second = answer.leaders(trials, [parse_space(SEED_SPACE).objectives[0]])[:2]
    assert (best["name"], second["name"]) == ("b.p01", "b.p00")
    v, separated = answer.judge(best, second, fast, slow)
    assert separated and v["kind"] == "differs" and v["pct"] > 5
    won = answer.winner(best, second, v, separated)
    assert won["name"] == "b.p01" and not won["equal_choice"] and won["words"].startswith("b.p01 wins: against b.p00")
    assert v["text"] in won["words"]


def test_two_points_that_cannot_be_told_apart_give_the_cheaper_as_the_equal_choice():
    rng = random.Random(2)
    a = [100 * (1 + rng.gauss(0, 0.02)) for _ in range(5)]
    b = [100 * (1 + rng.gauss(0, 0.02)) for _ in range(5)]
    deep = _trial("b.p05", {"speculative-config.num_speculative_tokens": 3}, 100.4)
    shallow = _trial("b.p02", {"speculative-config.num_speculative_tokens": 2}, 100.1)
    v, separated = answer.judge(deep, shallow, a, b)
    assert not separated and v["kind"] in ("no_difference", "not_enough")
    won = answer.winner(deep, shallow, v, separated)
    assert won["equal_choice"] and won["name"] == "b.p02" and won["runner_up"] == "b.p05"
    assert "cannot be told apart" in won["words"] and "b.p02 is the equal choice: it asks less" in won["words"]
    # two points that ask the same of the unit (a dtype): the better median, and the answer says why
    f32 = _trial("t.p01", {"dtype": "float32"}, 360.2)
    bf16 = _trial("t.p00", {"dtype": "bfloat16"}, 264.1)
    won = answer.winner(f32, bf16, v, False)
    assert won["name"] == "t.p01" and "the two ask the same of the unit and its median is the higher" in won["words"]


def test_two_objectives_rank_the_pareto_front_first():
    objectives = parse_space({**SEED_SPACE, "objective": ["single", {"parallel": 8}]}).objectives
    trials = [{**_trial("p0", {}, 100.0), "figures": {"single": 100.0, "parallel@8": 300.0}},
              {**_trial("p1", {}, 90.0), "figures": {"single": 90.0, "parallel@8": 400.0}},
              {**_trial("p2", {}, 95.0), "figures": {"single": 95.0, "parallel@8": 290.0}}]
    assert answer.pareto_front(trials, ["single", "parallel@8"]) == ["p0", "p1"]
    assert [t["name"] for t in answer.leaders(trials, objectives)][:2] == ["p0", "p1"]


def test_the_answer_says_where_its_figures_come_from(tmp_path):
    from sparkbench.report.terminal import CPU_LABEL, SIMULATED_LABEL
    from sparkbench.runner.tune import answer_lines

    doc = {"base": "tiny-bf16", "objectives": ["single"], "budget": {"trials": 2}, "trials": [], "winner": None}
    assert answer_lines({**doc, "simulated": True, "backends": ["vllm-sim"]}, tmp_path)[0] == SIMULATED_LABEL
    assert answer_lines({**doc, "simulated": False, "backends": ["vllm-cpu"]}, tmp_path)[0] == CPU_LABEL
    # nothing measured: no figure to label
    assert answer_lines({**doc, "simulated": None, "backends": []}, tmp_path)[0].startswith("tune tiny-bf16")


def test_a_tune_over_several_units_takes_peers_only():
    from sparkbench.tune.units import peer_problem

    assert peer_problem({"spark01": "dgx-spark", "spark02": "dgx-spark"}) is None
    assert peer_problem({"spark01": "dgx-spark"}) is None
    said = peer_problem({"spark01": "dgx-spark", "spark02": "dgx-spark", "cpu01": "x86-cpu"})
    assert said and "not peers" in said and "spark01, spark02: dgx-spark" in said and "cpu01: x86-cpu" in said
    assert "one tune per profile" in said
