"""The serving workload's settings (sparkbench.settings): ``bench_workloads: serving`` turns the
arrival-rate phase on, bad values name the variable and the fix, and measure.py's command line
carries the options measure.py itself parses (its own parser is the oracle)."""
from __future__ import annotations

import pytest

from sparkbench import measure, settings
from sparkbench.errors import InputError

pytestmark = pytest.mark.unit

ARGV = dict(python="python3", script="measure.py", base_url="http://127.0.0.1:8000", model="m",
            quality_file="q.json", sandbox_image="img")


def test_the_standard_workload_has_no_rate_phase():
    s = settings.normalize(settings.from_vars({}))
    assert s["rates"] == []
    assert "--rate" not in settings.measure_argv(s, **ARGV)


def test_serving_turns_the_rate_sweep_on_with_the_slo():
    s = settings.normalize(settings.from_vars({"bench_workloads": "serving"}))
    assert s["rates"] == settings.SERVING_RATES
    argv = settings.measure_argv(s, **ARGV)
    args = measure.build_parser().parse_args(argv[2:])
    assert args.rate == [0.25, 0.5, 1.0, 2.0]
    assert args.rate_duration == 30.0 and args.burstiness == 1.0 and args.rate_seed == 0
    assert args.slo == {"ttft": 2.0, "tpot": 0.05, "e2e": 30.0}
    assert args.rate_requests is None and args.rate_search is None


def test_own_rates_and_search_win_over_the_serving_defaults():
    s = settings.normalize(settings.from_vars({"bench_workloads": ["standard", "serving"],
                                               "llm_bench_rates": [1, "inf"], "llm_bench_rate_requests": 20,
                                               "llm_bench_rate_search": 0.9, "llm_bench_slo": {"ttft": 1}}))
    args = measure.build_parser().parse_args(settings.measure_argv(s, **ARGV)[2:])
    assert args.rate == [1.0, float("inf")]
    assert args.rate_requests == 20 and args.rate_search == 0.9 and args.slo == {"ttft": 1.0}


def test_an_unknown_workload_is_an_input_error():
    with pytest.raises(InputError, match="bench_workloads has agents; use standard or serving"):
        settings.from_vars({"bench_workloads": "agents"})


@pytest.mark.parametrize("key,value,words", [
    ("rates", [1, 0], "llm_bench_rates has 0"),
    ("rates", "fast", "llm_bench_rates has 'fast'"),
    ("rate_duration_s", 0, "llm_bench_rate_duration_s is 0"),
    ("burstiness", -1, "llm_bench_burstiness is -1"),
    ("rate_requests", 0, "llm_bench_rate_requests is 0"),
    ("rate_seed", -2, "llm_bench_rate_seed is -2"),
    ("rate_search", 1.5, "llm_bench_rate_search is 1.5"),
    ("slo", {"latency": 3}, "llm_bench_slo has latency: 3"),
    ("slo", {"ttft": -1}, "llm_bench_slo has ttft: -1"),
])
def test_bad_rate_settings_name_the_variable(key, value, words):
    errors = settings.settings_errors({key: value})
    assert any(words in e for e in errors), errors


def test_a_concurrency_search_runs_without_rates_and_a_rate_search_needs_them():
    s = settings.normalize(settings.from_vars({"llm_bench_rate_search": 0.9, "llm_bench_search_by": "concurrency",
                                               "llm_bench_rate_max_concurrency": 2, "llm_bench_rate_requests": 16}))
    args = measure.build_parser().parse_args(settings.measure_argv(s, **ARGV)[2:])
    assert args.rate is None and args.search_by == "concurrency" and args.rate_search == 0.9
    assert args.rate_max_concurrency == 2 and args.rate_requests == 16 and args.slo == settings.DEFAULTS["slo"]
    errors = settings.settings_errors({"rate_search": 0.9, "rates": []})
    assert any("llm_bench_rates is empty" in e and "llm_bench_search_by: concurrency" in e for e in errors)
    assert any("llm_bench_rate_max_concurrency" in e for e in settings.settings_errors({"rate_max_concurrency": 0}))
    assert any("llm_bench_search_by" in e for e in settings.settings_errors({"search_by": "tokens"}))


def test_serving_turns_every_phase_on_where_its_setting_is_at_the_default():
    s = settings.normalize(settings.from_vars({"bench_workloads": "serving"}))
    assert s["prefix_tokens"] == settings.SERVING["prefix_tokens"] and s["turns"] == settings.SERVING["turns"]
    assert s["tools"] is True
    own = settings.normalize(settings.from_vars({"bench_workloads": "serving", "llm_bench_prefix_tokens": 1024,
                                                 "llm_bench_turns": 2}))
    assert own["prefix_tokens"] == 1024 and own["turns"] == 2
    plain = settings.normalize(settings.from_vars({}))
    assert plain["prefix_tokens"] == 0 and plain["turns"] == 0 and plain["tools"] is False
    argv = settings.measure_argv(plain, **ARGV)
    assert not {"--prefix-tokens", "--turns", "--tools"} & set(argv)
    for key, bad in (("prefix_requests", 1), ("turns", -1), ("tool_choice", "always"), ("tools", "maybe")):
        errors = settings.settings_errors({key: bad})
        assert errors and f"llm_bench_{key}" in errors[0], (key, errors)
