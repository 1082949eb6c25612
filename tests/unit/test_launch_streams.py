"""torchrun's --redirects/--tee routing on top of the per-cycle log (pure rules)."""

from __future__ import annotations

from pathlib import Path

from slurm_ft.launch.output import streams as st
from slurm_ft.launch.output.streams import Route
from slurm_ft.settingsyntax import Std, parse_std


def rules(**kw) -> st.OutputRules:
    base = {"cycle_log": False, "tee": False, "tee_local_ranks": None}
    base.update(kw)
    return st.OutputRules(**base)


def test_without_rank_files_one_pipe_as_before() -> None:
    assert st.plan(rules(), 0).any_pipe is False
    p = st.plan(rules(cycle_log=True, tee=True, tee_local_ranks=frozenset({0})), 1)
    assert (p.split, p.out) == (False, Route(pipe=True, cycle_log=True, rank_file=False, echo=False))
    assert st.plan(rules(cycle_log=True, tee=True, tee_local_ranks=frozenset({0})), 0).out.echo


def test_redirects_take_streams_off_the_console_tee_keeps_them() -> None:
    r = rules(redirects=parse_std("1"), tee_streams=parse_std("0:2"))
    p0 = st.plan(r, 0)
    assert p0.split
    assert p0.out == Route(pipe=True, cycle_log=False, rank_file=True, echo=False)
    assert p0.err == Route(pipe=True, cycle_log=False, rank_file=True, echo=True)
    p1 = st.plan(r, 1)  # stdout redirected, stderr untouched: inherited
    assert p1.err == Route(pipe=False, cycle_log=False, rank_file=False, echo=False)


def test_with_a_cycle_log_every_stream_is_piped() -> None:
    p = st.plan(rules(cycle_log=True, redirects=parse_std("0:3")), 1)
    assert p.split and p.out == Route(pipe=True, cycle_log=True, rank_file=False, echo=False)


def test_rank_dir_layout() -> None:
    assert st.rank_dir("/logs", "77-a0", 3, 12) == Path("/logs/77-a0/attempt_3/12")


def test_rules_from_settings() -> None:
    from slurm_ft import config

    settings = config.load({}, None, {"applog.redirects": "0:1", "applog.prefix": "/l/j.log"})
    r = st.rules_for(settings.applog)
    assert (r.cycle_log, r.tee, r.rank_files, r.redirects.of(0)) == (True, False, True, Std.OUT)
    assert not st.rules_for(config.Settings().applog).rank_files
