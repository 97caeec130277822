"""Parsing sacctmgr's association and QOS rows into the tightest submit and running limits (pure)."""

from __future__ import annotations

import pytest

from autoexp.campaign.preflight.job_limits import Limit, LimitsParseError, parse, pool_fit

OUT = """#assoc
proj||normal,high|10|40|||gres/gpu=16|
other||normal||5||||
#qos
normal|4|||||
high||30|||cpu=64|
debug||2||||
"""


def test_tightest_limits_of_the_account_and_its_qos() -> None:
    limits = parse(OUT, account="proj")
    assert limits.submit == Limit("MaxSubmitJobsPerUser", 30, "QOS high")
    assert limits.running == Limit("MaxJobsPerUser", 4, "QOS normal")
    assert limits.tres == ("MaxTRES gres/gpu=16 (association proj)", "MaxTRESPerUser cpu=64 (QOS high)")
    assert limits.pool_slots(50) == 30
    assert limits.pool_slots(8) == 8
    # Without an account, every association of the user counts; a named QOS replaces theirs.
    assert parse(OUT).submit == Limit("MaxSubmitJobs", 5, "association other")
    assert parse(OUT, account="proj", qos="debug").submit == Limit("MaxSubmitJobsPerUser", 2, "QOS debug")


def test_no_limits_means_unlimited() -> None:
    limits = parse("#assoc\nproj||normal||||||\n#qos\nnormal||||||\n")
    assert (limits.submit, limits.running) == (None, None)
    assert pool_fit(limits, "p", 500) == (
        True,
        "pool p (500 slots) fits; submit: unlimited; running: unlimited",
    )


def test_unexpected_output_is_quoted() -> None:
    not_a_number = r"^sacctmgr printed a MaxSubmitJobs that is not a number: 'lots'$"
    with pytest.raises(LimitsParseError, match=not_a_number):
        parse("#assoc\nproj||normal||lots||||\n#qos\n")
    with pytest.raises(LimitsParseError, match=r"^unexpected sacctmgr output line: 'sacctmgr: error: x'$"):
        parse("sacctmgr: error: x\n")
    with pytest.raises(LimitsParseError, match=r"^sacctmgr printed no QOS section: '#assoc'$"):
        parse("#assoc\n")
