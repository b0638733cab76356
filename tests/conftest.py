"""Shared fixtures: the oracle (built once per session from the installed stack)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import docs_oracle  # noqa: E402


@pytest.fixture(scope="session")
def oracle() -> docs_oracle.Oracle:
    return docs_oracle.build_oracle()


@pytest.fixture(scope="session")
def ident(oracle):
    from test_references import ENV_ALLOWLIST, FLAG_ALLOWLIST, NAME_ALLOWLIST

    return docs_oracle.IdentifierChecker(oracle, NAME_ALLOWLIST, ENV_ALLOWLIST, FLAG_ALLOWLIST)


@pytest.fixture(scope="session")
def commands(oracle, ident):
    return docs_oracle.CommandChecker(oracle, ident)
