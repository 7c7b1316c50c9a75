import pytest

from capmark.config import (
    MAX_SCALE,
    check_dsn,
    check_scale,
    default_jobs,
    parse_duration,
    parse_jobs,
    parse_params,
    parse_rate,
    redact_dsn,
    redact_text,
)
from capmark.errors import CapmarkError


@pytest.mark.parametrize("text,seconds", [("30", 30.0), ("30s", 30.0), ("2m", 120.0), ("1h", 3600.0),
                                          ("500ms", 0.5), ("1.5s", 1.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5s", "5 minutes"])
def test_bad_durations(text):
    with pytest.raises(CapmarkError, match="duration"):
        parse_duration(text)


def test_jobs():
    assert parse_jobs("1,2,4,8") == [1, 2, 4, 8]
    assert parse_jobs(" 3 ") == [3]


@pytest.mark.parametrize("text", ["", "a,b", "0,1", "4,2", "1,1", "1,-2", "1000"])
def test_bad_jobs(text):
    with pytest.raises(CapmarkError):
        parse_jobs(text)


def test_default_jobs_reach_twice_the_cores():
    assert default_jobs(2) == [1, 2, 4]
    assert default_jobs(4) == [1, 2, 4, 8]
    assert default_jobs(6) == [1, 2, 4, 8, 12]
    assert default_jobs(1) == [1, 2]


def test_params():
    assert parse_params(["update_pct=20", "x = 3"]) == {"update_pct": "20", "x": "3"}
    with pytest.raises(CapmarkError, match="name=value"):
        parse_params(["update_pct"])


@pytest.mark.parametrize("dsn", [
    "postgresql://bob:s3cret@db.example:5432/app",
    "postgresql://bob:s3cret@db.example/app?sslmode=require&password=s3cret",
    "host=db user=bob password=s3cret dbname=app",
    "host=db user=bob password='s3 cret' dbname=app",
])
def test_redaction_removes_password(dsn):
    red = redact_dsn(dsn)
    assert "s3cret" not in red and "s3 cret" not in red
    assert "bob" in red and "***" in red
    assert "s3cret" not in redact_text(f"could not connect to {dsn}: refused")


@pytest.mark.parametrize("dsn,redacted", [
    ("postgresql:///app?host=/var/run/postgresql&password=s3cret",
     "postgresql:///app?host=/var/run/postgresql&password=***"),
    ("postgresql://bob:s3cret@/app?host=/tmp", "postgresql://bob:***@/app?host=/tmp"),
    ("postgres://db.example/app?PASSWORD=s3cret&sslmode=require", "postgres://db.example/app?PASSWORD=***&sslmode=require"),
    ("postgresql://bob@db.example:5432/app", "postgresql://bob@db.example:5432/app"),
])
def test_redaction_keeps_the_url_usable(dsn, redacted):
    """The redacted URL is the same URL with the password starred: an empty host keeps its '//'."""
    assert redact_dsn(dsn) == redacted


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, [1]])
def test_durations_from_files_must_be_finite_numbers(value):
    with pytest.raises(CapmarkError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "-3", "abc", "1e400"])
def test_bad_rates(text):
    with pytest.raises(CapmarkError, match="rate"):
        parse_rate(text)


def test_rates():
    assert parse_rate("500") == 500.0 and parse_rate("500/s") == 500.0 and parse_rate(None) == 0.0


@pytest.mark.parametrize("dsn", ["postgresql://bob@db/app", "postgres://db/app", "host=db dbname=app",
                                 "postgresql:///app?host=/tmp"])
def test_good_dsns_pass_the_check(dsn):
    check_dsn(dsn)


def test_scale_bound_names_the_reason():
    check_scale(MAX_SCALE)
    with pytest.raises(CapmarkError, match="10\\^9 rows per table"):
        check_scale(MAX_SCALE + 1)
