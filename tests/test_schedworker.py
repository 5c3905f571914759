"""isl's scheduler in its helper process (``polytc.poly.schedworker``): the same schedule
as in this process, a deadline that kills it, and a helper that comes back."""
from __future__ import annotations

import islpy as isl
import pytest

from polytc.poly import schedule as S
from polytc.poly import schedworker as W

DOMAIN = "{ S0[i, j] : 0 <= i < 40 and 0 <= j < 30; S1[i, j] : 0 <= i < 40 and 0 <= j < 30 }"
DEPS = "{ S0[i, j] -> S1[i, j]; S0[i, j] -> S1[i, j + 1] : j < 29 }"


def _constraints(ctx):
    deps = isl.UnionMap.read_from_str(ctx, DEPS)
    return (isl.ScheduleConstraints.on_domain(isl.UnionSet.read_from_str(ctx, DOMAIN))
            .set_validity(deps).set_proximity(deps).set_coincidence(deps))


@pytest.mark.parametrize("fusion", ["max", "preserve", "min"])
def test_the_helper_finds_the_schedule_found_here(fusion):
    ctx = isl.Context()
    options = S.configure(ctx, fusion)
    sc = _constraints(ctx)
    here = sc.compute_schedule()
    text = W.schedule(options, sc.to_str(), 30.0)
    assert isl.Schedule.read_from_str(ctx, text).plain_is_equal(here)


def test_past_the_deadline_none_then_a_new_helper(monkeypatch):
    ctx = isl.Context()
    options = S.configure(ctx, "max")
    text = _constraints(ctx).to_str()
    assert W.schedule(options, text, 30.0) is not None
    proc = W._WORKER._proc
    waited = []
    monkeypatch.setattr(W.select, "select", lambda r, w, x, t: waited.append(t) or ([], [], []))
    assert W.schedule(options, text, 0.5) is None and waited == [0.5]  # no answer in time
    assert W._WORKER._proc is None and proc.poll() is not None  # killed, not waited for
    monkeypatch.undo()
    assert W.schedule(options, text, 30.0) is not None  # started again


def test_a_helper_killed_from_outside_is_replaced():
    ctx = isl.Context()
    options = S.configure(ctx, "max")
    text = _constraints(ctx).to_str()
    assert W.schedule(options, text, 30.0) is not None
    W._WORKER._proc.kill()
    W._WORKER._proc.wait()
    assert W.schedule(options, text, 30.0) is not None


def test_bad_constraints_raise_an_isl_error():
    with pytest.raises(isl.Error):
        W.schedule({}, "{ domain: not isl }", 30.0)
    ctx = isl.Context()
    assert W.schedule(S.configure(ctx, "max"), _constraints(ctx).to_str(), 30.0)
