"""Files cannot make dse hang, grow without bound or run code: expressions, YAML, storage paths."""
from __future__ import annotations

import time

import pytest

from dse.errors import ConfigError
from dse.space import Space, load_space

BASE = {"name": "g", "fixed": {"model": "gpt3-175b"}, "axes": {"tp": [1, 2, 4, 8]}}


@pytest.mark.parametrize("constraint", ["tp < 9**9**9", "tp ** 10**10 > 0", "(2**64)**(2**64) > tp"])
def test_huge_powers_finish_at_once(constraint):
    t0 = time.perf_counter()
    sp = Space.from_dict({**BASE, "constraints": [constraint]})
    assert sp.size in (0, 4) and time.perf_counter() - t0 < 2.0


def test_strings_do_not_multiply():
    with pytest.raises(ConfigError, match="unsupported string operation"):
        Space.from_dict({**BASE, "constraints": ["'a' * 10**10 == 'b'"]})


def test_yaml_aliases_are_refused_before_expansion(tmp_path):
    p = tmp_path / "lol.yaml"
    p.write_text("name: lol\ndescription: &a [lol, lol, lol]\nfixed: {model: gpt3-175b}\naxes: {tp: [1, 2]}\n"
                 "x: &b [*a, *a, *a]\n")
    with pytest.raises(ConfigError, match=r"line 5: YAML aliases \(\*a\) are not allowed"):
        load_space(p)


def test_oversized_file_is_refused(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("name: big\ndescription: '" + "x" * (2 << 20) + "'\n")
    with pytest.raises(ConfigError, match="too large for a space file"):
        load_space(p)


def test_journal_storage_refuses_a_foreign_file(tmp_path):
    from dse.study.storage import check_journal
    own = tmp_path / "notes.txt"
    own.write_text("my notes\n")
    with pytest.raises(ConfigError, match="is not an Optuna journal"):
        check_journal(own, "s")
    journal = tmp_path / "j.log"
    journal.write_text('{"op_code": 0, "worker_id": "w", "study_name": "other", "directions": [1]}\n')
    with pytest.raises(ConfigError, match="is the journal of other, not of 's'"):
        check_journal(journal, "s")
    check_journal(journal, "other")
    check_journal(tmp_path / "absent.log", "s")
    assert own.read_text() == "my notes\n"
