"""The trace's lane rule (sim::TrackLanes) through the module, as the live runner's trace
uses it: the first lane of a slice's track whose last slice ends by its start."""
import itertools
import random

import pytest

import hgsim


def test_overlapping_slices_take_the_first_free_lane_and_touching_ones_share_it():
    track, other = (0, 1), (2, 0)
    # [0, 2) lane 0; [1, 3) overlaps it: lane 1; [2, 2.5) starts where lane 0 ends: lane 0;
    # [2.2, 4) overlaps both: lane 2; the other track starts its own lanes.
    placed = hgsim._hgsim.trace_lanes([track, track, track, track, other],
                                      [0.0, 1.0, 2.0, 2.2, 1.5], [2.0, 3.0, 2.5, 4.0, 1.6])
    assert placed == [(0, True), (1, True), (0, False), (2, True), (0, True)]
    assert hgsim._hgsim.lane_thread(1, 2) == 1 + 2 * 2**20
    assert hgsim._hgsim.lane_name("a/n0/g0 comm", 0) == "a/n0/g0 comm"
    assert hgsim._hgsim.lane_name("a/n0/g0 comm", 1) == "a/n0/g0 comm (lane 2)"


def test_no_two_slices_of_a_lane_overlap_and_no_lane_is_opened_needlessly():
    rng = random.Random(3)
    starts = sorted(rng.uniform(0, 10) for _ in range(300))
    ends = [s + rng.uniform(0.01, 2) for s in starts]
    placed = hgsim._hgsim.trace_lanes([(0, 0)] * len(starts), starts, ends)
    by_lane = {}
    for (lane, _), s, e in zip(placed, starts, ends):
        by_lane.setdefault(lane, []).append((s, e))
    for slices in by_lane.values():
        for (_, end), (start, _) in zip(slices, slices[1:]):
            assert end <= start
    # Lanes opened = the most slices in flight at once (slices given by their starts).
    points = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends], key=lambda p: (p[0], p[1]))
    depth = max(itertools.accumulate(d for _, d in points))
    assert len(by_lane) == depth


def test_bad_slices_are_errors_naming_the_slice():
    with pytest.raises(hgsim.Error, match="one entry per slice"):
        hgsim._hgsim.trace_lanes([(0, 0)], [0.0, 1.0], [1.0])
    with pytest.raises(hgsim.Error, match="slice 1 needs finite times"):
        hgsim._hgsim.trace_lanes([(0, 0), (0, 0)], [0.0, 2.0], [1.0, 1.0])
