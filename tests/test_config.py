import pytest

from capmark.config import default_jobs, parse_duration, parse_jobs, parse_params, redact_dsn, redact_text
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
