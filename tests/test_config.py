"""Tests for transpiler.cli.config: rule selection, pyproject lookup, validation, excludes."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transpiler.cli.config import (
    DEFAULT_EXCLUDE,
    ConfigError,
    Settings,
    find_pyproject,
    load_settings,
    settings_fingerprint,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- selection ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("select", "ignore", "extend_select", "code", "expected"),
    [
        ((), (), (), "TP101", True),  # empty select means all
        (("ALL",), (), (), "TP101", True),
        (("TP1",), (), (), "TP101", True),
        (("TP1",), (), (), "TP201", False),
        (("TP",), ("TP1",), (), "TP101", False),  # longer ignore beats shorter select
        (("TP",), ("TP1",), (), "TP201", True),
        (("TP101",), ("TP",), (), "TP101", True),  # longer select beats shorter ignore
        (("TP101",), ("TP",), (), "TP102", False),
        (("TP1",), ("TP1",), (), "TP101", False),  # tie goes to ignore
        (("ALL",), ("ALL",), (), "TP101", False),
        ((), ("TP1",), ("TP101",), "TP101", True),  # extend_select re-enables one code
        ((), ("TP1",), ("TP101",), "TP102", False),
        (("TP2",), (), ("TP1",), "TP101", True),  # extend_select adds to select
        (("TP2",), (), ("TP1",), "TP301", False),
        (("TP",), ("ALL",), (), "TP101", True),
    ],
)
def test_is_selected_longest_prefix_wins(select, ignore, extend_select, code, expected):
    settings = Settings(select=select, ignore=ignore, extend_select=extend_select)
    assert settings.is_selected(code) is expected


codes = st.from_regex(r"TP[1-9][0-9]{2}", fullmatch=True)
selectors = st.lists(st.sampled_from(["ALL", "TP", "TP1", "TP2", "TP10", "TP101", "TP201"]), max_size=4)


@given(code=codes, select=selectors, ignore=selectors)
def test_exact_code_decides_over_any_prefix(code, select, ignore):
    # An exact code beats every shorter prefix; the same exact code on both sides is a tie,
    # and ties go to ignore.
    selected = Settings(select=tuple(select), ignore=tuple(ignore), extend_select=(code,))
    assert selected.is_selected(code) == (code not in ignore)
    assert not Settings(select=tuple(select) + (code,), ignore=tuple(ignore) + (code,)).is_selected(code)


# --- pyproject lookup ----------------------------------------------------------


def test_find_pyproject_skips_files_without_the_table(tmp_path):
    top = write(tmp_path / "pyproject.toml", "[tool.transpile]\nselect = ['TP1']\n")
    write(tmp_path / "pkg" / "pyproject.toml", "[project]\nname = 'pkg'\n")
    source = write(tmp_path / "pkg" / "src" / "mod.py", "")
    assert find_pyproject(source) == top
    assert find_pyproject(source.parent) == top


def test_find_pyproject_prefers_the_nearest_table(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.transpile]\n")
    inner = write(tmp_path / "a" / "b" / "pyproject.toml", "[tool.transpile]\nignore = ['TP2']\n")
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    assert find_pyproject(deep) == inner
    assert find_pyproject(tmp_path / "a") == tmp_path / "pyproject.toml"


def test_find_pyproject_ignores_a_broken_unrelated_pyproject(tmp_path):
    write(tmp_path / "pyproject.toml", "[project\nname = \n")
    source = write(tmp_path / "proj" / "x.py", "")
    found = find_pyproject(source)
    assert found is None or tmp_path not in found.parents


def test_find_pyproject_mentioning_transpile_outside_the_tool_table(tmp_path):
    write(tmp_path / "pyproject.toml", "[project]\ndependencies = ['transpile']\n")
    found = find_pyproject(tmp_path)
    assert found is None or tmp_path not in found.parents


# --- loading -------------------------------------------------------------------


def test_load_settings_reads_every_key(tmp_path):
    write(
        tmp_path / "pyproject.toml",
        """
[tool.transpile]
select = ["TP1"]
ignore = ["TP102"]
extend-select = ["TP201"]
exclude = ["gen"]
extend-exclude = ["*_pb2.py"]
force-exclude = true
cache-dir = ".cache/transpile"
unsafe-fixes = true
side-effects = "remove"
respect-gitignore = false
per-file-ignores = { "tests/*" = ["TP1"], "!models/*" = ["TP2", "TP301"] }
""",
    )
    settings = load_settings(tmp_path / "src" / "a.py")
    expected = {
        "select": ("TP1",),
        "ignore": ("TP102",),
        "extend_select": ("TP201",),
        "exclude": ("gen",),
        "extend_exclude": ("*_pb2.py",),
        "force_exclude": True,
        "cache_dir": ".cache/transpile",
        "unsafe_fixes": True,
        "side_effects": "remove",
        "respect_gitignore": False,
        "per_file_ignores": (("tests/*", ("TP1",)), ("!models/*", ("TP2", "TP301"))),
        "root": tmp_path,
    }
    # Also guards that every Settings field is configurable (or is root).
    assert {f.name for f in fields(Settings)} == set(expected)
    assert {name: getattr(settings, name) for name in expected} == expected


def test_load_settings_without_a_file_uses_defaults_and_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(tmp_path)
    if find_pyproject(tmp_path) is None:
        assert settings == Settings(root=tmp_path)
    assert settings.exclude == DEFAULT_EXCLUDE
    assert "site-packages" not in DEFAULT_EXCLUDE


def test_overrides_replace_file_values_and_none_keeps_them(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.transpile]\nselect = ['TP1']\nignore = ['TP102']\n")
    settings = load_settings(tmp_path, {"select": ["TP2"], "ignore": None, "force_exclude": True})
    assert settings.select == ("TP2",)
    assert settings.ignore == ("TP102",)
    assert settings.force_exclude is True


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        ('select = "TP1"', "select", "expected an array of strings, got string"),
        ("ignore = [1, 2]", "ignore", "expected an array of strings"),
        ("force-exclude = 'yes'", "force-exclude", "expected a boolean"),
        ("cache-dir = 3", "cache-dir", "expected a string, got integer"),
        ("select = ['tp1']", "select", "not a rule code or prefix"),
        ("extend_select = ['TP1']", "extend_select", "did you mean 'extend-select'"),
        ("colour = true", "colour", "unknown key"),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path, body, key, fragment):
    path = write(tmp_path / "pyproject.toml", f"[tool.transpile]\n{body}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: ")
    assert fragment in message
    assert (info.value.source, info.value.key) == (str(path), key)


def test_invalid_toml_names_the_file_and_the_position(tmp_path):
    path = write(tmp_path / "pyproject.toml", '[tool.transpile]\nselect = ["TP1"\nignore = []\n')
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_settings(tmp_path / "sub")
    assert str(info.value).startswith(f"{path}: invalid TOML: ")
    assert "line" in str(info.value)


def test_table_of_the_wrong_type(tmp_path):
    path = write(tmp_path / "pyproject.toml", "[tool]\ntranspile = 3\n")
    with pytest.raises(ConfigError, match=r"\[tool.transpile\] must be a table, got integer") as info:
        load_settings(tmp_path)
    assert str(path) in str(info.value)


def test_bad_override_names_the_command_line(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.transpile]\n")
    with pytest.raises(ConfigError, match=r"^command line: select: expected an array of strings"):
        load_settings(tmp_path, {"select": "TP1"})
    with pytest.raises(ConfigError, match=r"^command line: selct: unknown key \(did you mean 'select'\?\)"):
        load_settings(tmp_path, {"selct": ["TP1"]})


# --- excludes ------------------------------------------------------------------


def test_default_excludes_match_any_component(tmp_path):
    settings = Settings(root=tmp_path)
    assert settings.is_excluded(tmp_path / ".venv")
    assert settings.is_excluded(tmp_path / "pkg" / "__pycache__" / "m.py")
    assert settings.is_excluded(tmp_path / "build" / "lib" / "m.py")
    assert not settings.is_excluded(tmp_path / "src" / "builder.py")
    assert not settings.is_excluded(tmp_path / "lib" / "site-packages" / "transformers" / "m.py")


def test_excludes_are_relative_to_root(tmp_path):
    root = tmp_path / "build" / "project"  # the project itself lives under "build"
    settings = Settings(root=root)
    assert not settings.is_excluded(root / "src" / "m.py")
    assert settings.is_excluded(root / "dist" / "m.py")


def test_relative_paths_resolve_against_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = Settings(root=tmp_path, extend_exclude=("generated",))
    assert settings.is_excluded(Path("generated/m.py"))
    assert not settings.is_excluded(Path("src/m.py"))


def test_extend_exclude_globs_and_leading_paths(tmp_path):
    settings = Settings(root=tmp_path, extend_exclude=("*_pb2.py", "tests/data", "docs/"))
    assert settings.is_excluded(tmp_path / "proto" / "model_pb2.py")
    assert settings.is_excluded(tmp_path / "tests" / "data" / "case" / "x.py")
    assert settings.is_excluded(tmp_path / "docs" / "conf.py")
    assert not settings.is_excluded(tmp_path / "tests" / "test_data.py")
    assert settings.is_excluded(tmp_path / ".git" / "hooks" / "x.py")  # defaults still apply


def test_exclude_replaces_the_defaults(tmp_path):
    settings = Settings(root=tmp_path, exclude=("gen",))
    assert settings.is_excluded(tmp_path / "gen" / "m.py")
    assert not settings.is_excluded(tmp_path / "build" / "m.py")


def test_paths_outside_root_match_by_their_own_components(tmp_path):
    settings = Settings(root=tmp_path / "project")
    assert settings.is_excluded(tmp_path / "other" / "venv" / "m.py")
    assert not settings.is_excluded(tmp_path / "other" / "m.py")


# --- fingerprint ---------------------------------------------------------------


def test_fingerprint_tracks_rule_selection_only(tmp_path):
    base = Settings(select=("TP1", "TP2"), ignore=("TP102",))
    fingerprint = settings_fingerprint(base)
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert settings_fingerprint(Settings(select=("TP2", "TP1"), ignore=("TP102",))) == fingerprint
    assert settings_fingerprint(Settings(select=("TP1", "TP2"), ignore=("TP102",), root=tmp_path)) == fingerprint
    assert (
        settings_fingerprint(Settings(select=("TP1", "TP2"), ignore=("TP102",), extend_exclude=("x",))) == fingerprint
    )
    assert settings_fingerprint(Settings(select=("TP1", "TP2"))) != fingerprint
    assert (
        settings_fingerprint(Settings(select=("TP1", "TP2"), ignore=("TP102",), extend_select=("TP3",))) != fingerprint
    )
    # Same value in a different field must not collide.
    assert settings_fingerprint(Settings(select=("TP1",))) != settings_fingerprint(Settings(ignore=("TP1",)))
