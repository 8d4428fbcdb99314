"""The license: the repository's LICENSE, each source file's first line, and
the installed package's metadata all say Apache-2.0, so that whoever adopts
a file or the package knows the terms."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPDX = "SPDX-License-Identifier: Apache-2.0"


def test_the_license_is_apache_2() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text.splitlines()[1] and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_source_file_says_its_license_in_its_first_line() -> None:
    try:
        listed = subprocess.run(["git", "ls-files", "*.cc", "*.h", "python/trainprof/*.py",
                                 "python/trainprof/*.pyi"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are not known")
    assert len(listed) > 300, listed[:5]
    missing = []
    for name in listed:
        lines = (REPO / name).read_text(errors="replace").splitlines()[:2]
        first = lines[1] if lines and lines[0].startswith("#!") else (lines[0] if lines else "")
        if "Copyright trainprof authors." not in first or SPDX not in first:
            missing.append(name)
    assert not missing, f"no '{SPDX}' first line: {missing[:10]}"


def test_the_installed_package_declares_apache_2() -> None:
    meta = importlib.metadata.metadata("trainprof")
    declared = meta.get("License-Expression") or meta.get("License")
    assert declared == "Apache-2.0", dict(meta)
    files = importlib.metadata.files("trainprof") or []
    assert any(f.name == "LICENSE" for f in files), [str(f) for f in files if "dist-info" in str(f)]
