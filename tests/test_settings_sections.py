"""Settings in sections: config.toml tables and `A2RL_SECTION__KEY` variables, today's flat
names as deprecated aliases (one line on stderr naming their new place), an unknown key of a
section refused by name, `Settings.updated`, and `a2rl config migrate`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from a2rl import settings_aliases
from a2rl.sandbox.docker import DockerSettings
from a2rl.sandbox.local import LocalSandbox, LocalSettings
from a2rl.sandbox.registry import BACKENDS
from a2rl.sections import Section
from a2rl.sections import base as section_base
from a2rl.settings import Settings, SettingsError, field_at, load_settings, setting_paths
from a2rl.settings_aliases import FLAT_ALIASES, env_name
from a2rl.settings_migrate import dumps, migrated

from .test_cli_user import cli, one_line_error

#: a value that is no setting's default, for every flat name (TOML types)
SAMPLES: dict[str, Any] = {
    "backend": "docker", "unsafe_local": True, "sandbox_disk_volume": "off",
    "grading_engine": "static", "grading_pause_cap_fraction": 0.5,
    "revision_exclude": ["a/*", "b"], "model_prices": {"m-1": {"input": 1.0, "output": 2.0}},
    "http_host": "0.0.0.0", "docker_image": "img:1", "judge_base_url": "http://127.0.0.1:9/v1",
    "judge_model": "judge-x", "judge_api_key_env": "MY_KEY", "narrative_base_url": "http://n/v1",
    "narrative_model": "story", "narrative_api_key_env": "STORY_KEY",
}


def _sample(flat: str) -> Any:
    if flat in SAMPLES:
        return SAMPLES[flat]
    field = field_at(FLAT_ALIASES[flat])
    default = field.default
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 3
    if isinstance(default, float):
        return default + 1.5
    assert isinstance(default, str), flat  # the sizes
    return "3g"


def _as_variable(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    settings_aliases._said.clear()  # each test sees its own first warning


def test_every_flat_name_has_a_place_and_no_setting_is_lost() -> None:
    for flat, path in FLAT_ALIASES.items():
        field_at(path)  # a KeyError names an alias pointing nowhere
        assert flat not in Settings.model_fields, flat
    paths = set(setting_paths())
    assert len(set(FLAT_ALIASES.values())) == len(FLAT_ALIASES)  # one old name per place
    assert set(FLAT_ALIASES.values()) <= paths
    top = {p for p in paths if "." not in p}
    assert top == {"home", "db_url", "default_budget", "base_model", "tasks",
                   "task_base_models", "legacy_task_settings", "prices"}


def test_flat_and_nested_spellings_load_the_same_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = {flat: _sample(flat) for flat in FLAT_ALIASES}
    nested_home, flat_home = tmp_path / "nested", tmp_path / "flat"
    nested_home.mkdir(), flat_home.mkdir()
    (flat_home / "config.toml").write_text(dumps(values))
    (nested_home / "config.toml").write_text(migrated(dumps(values))[0])
    nested, sources = load_settings(environ={"A2RL_HOME": str(nested_home)})
    assert capsys.readouterr().err == ""  # the sections' own spelling: nothing to say
    flat, _ = load_settings(environ={"A2RL_HOME": str(flat_home)})
    assert capsys.readouterr().err.count("\n") == 1  # every old name, in one line
    assert flat.model_dump(exclude={"home"}) == nested.model_dump(exclude={"home"})
    assert nested.sandbox.section(DockerSettings).memory == "3g" and nested.server.port == 8768
    assert nested.prices["m-1"].output == 2.0
    assert nested.sandbox.section(LocalSettings).unsafe is True
    assert sources["sandbox.docker.memory"] == f"file:{nested_home / 'config.toml'}"
    # the variables: A2RL_SECTION__KEY and the old A2RL_FLAT_NAME
    empty = tmp_path / "empty"
    by_section = {env_name(path): _as_variable(values[flat]) for flat, path in
                  FLAT_ALIASES.items()}
    by_flat = {f"A2RL_{flat.upper()}": _as_variable(v) for flat, v in values.items()}
    from_sections, sources = load_settings(environ={"A2RL_HOME": str(empty), **by_section})
    assert capsys.readouterr().err == ""
    from_flat, _ = load_settings(environ={"A2RL_HOME": str(empty), **by_flat})
    assert from_sections.model_dump() == from_flat.model_dump()
    assert from_sections.model_dump(exclude={"home"}) == nested.model_dump(exclude={"home"})
    assert sources["sandbox.local.memory"] == "env"


def test_a_deprecated_name_warns_once_in_one_line_naming_its_new_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.toml").write_text('docker_memory = "8g"\n[sandbox.local]\nmemory = "4g"\n')
    env = {"A2RL_HOME": str(tmp_path), "A2RL_HTTP_PORT": "9001"}
    settings, sources = load_settings(environ=env)
    assert settings.sandbox.section(DockerSettings).memory == "8g" and settings.server.port == 9001
    assert sources.spelled == {"sandbox.docker.memory": "docker_memory",
                               "server.port": "A2RL_HTTP_PORT"}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("a2rl: deprecated settings"), err
    for needle in ("A2RL_SERVER__PORT for A2RL_HTTP_PORT",
                   "[sandbox.docker] memory for config.toml docker_memory", "config migrate"):
        assert needle in err, (needle, err)
    load_settings(environ=env)
    assert capsys.readouterr().err == ""  # said once per process
    # a section's spelling wins over the old one given beside it
    both = load_settings(environ={**env, "A2RL_SERVER__PORT": "9002"})[0]
    assert both.server.port == 9002
    # a section is never one variable: A2RL_SANDBOX is a job's nonce, not the sandbox's JSON
    inside_a_job = load_settings(environ={"A2RL_HOME": str(tmp_path), "A2RL_SANDBOX": "n-1"})[0]
    assert inside_a_job.sandbox.section(DockerSettings).memory == "8g"


def test_an_unknown_key_of_a_section_is_refused_by_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[server]\nport = "80a"\n')
    with pytest.raises(SettingsError, match=r"config.toml: server.port = '80a': .*integer"):
        load_settings(environ={"A2RL_HOME": str(tmp_path)})
    config.write_text('sandbox = "docker"\n')  # a section given a value, not a table
    with pytest.raises(SettingsError, match="sandbox = 'docker'"):
        load_settings(environ={"A2RL_HOME": str(tmp_path)})
    config.write_text("[sandbox]\nnonsense = 1\n")  # neither a setting nor a backend's table
    with pytest.raises(SettingsError, match="'sandbox.nonsense' is not a setting"):
        load_settings(environ={"A2RL_HOME": str(tmp_path)})
    with pytest.raises(SettingsError, match="A2RL_GRADING__NONSENSE='1': not a setting"):
        load_settings(environ={"A2RL_HOME": str(tmp_path / "none"), "A2RL_GRADING__NONSENSE": "1"})
    # a backend's table is its own section's to check: every command does, by file and key
    config.write_text('[sandbox.docker]\nmemroy = "1g"\n')
    line = one_line_error(cli(tmp_path, "runs"), str(config),
                          "'sandbox.docker.memroy' is not a setting", "'sandbox.docker.memory'")
    assert "\n" not in line


@pytest.fixture
def two_word() -> Iterator[type[Section]]:
    """A backend with a section of its own, its name two words (`two-word`), and one with none
    (`bare`: the local backend's section is inherited, not its own), registered for a test."""

    class TwoWordSettings(Section, place="sandbox.two-word"):
        level: int = Field(1, ge=0, description="a level (test)")

    class TwoWord(LocalSandbox):
        settings_section = TwoWordSettings

    class Bare(LocalSandbox):
        pass

    BACKENDS.register("two-word", TwoWord)
    BACKENDS.register("bare", Bare)
    try:
        yield TwoWordSettings
    finally:
        BACKENDS.unregister("two-word")
        BACKENDS.unregister("bare")
        del section_base._DECLARED["sandbox", "two_word"]


def test_a_backends_table_is_checked_against_its_own_section(
        tmp_path: Path, two_word: type[Section]) -> None:
    """`[sandbox.<name>]` and `A2RL_SANDBOX__<NAME>__KEY`, a `-` in the name `_` in a variable:
    one section, read by its owner, listed by `config show` and checked by every command."""
    config = tmp_path / "config.toml"
    config.write_text("[sandbox.two-word]\nlevel = 3\n")
    settings, sources = load_settings(environ={"A2RL_HOME": str(tmp_path)})
    assert settings.sandbox.section(two_word).level == 3
    assert sources["sandbox.two_word.level"] == f"file:{config}"
    by_variable = load_settings(environ={"A2RL_HOME": str(tmp_path),
                                         "A2RL_SANDBOX__TWO_WORD__LEVEL": "4"})[0]
    assert by_variable.sandbox.section(two_word).level == 4  # the variable over the file
    assert Settings().sandbox.section(two_word).level == 1  # no table: the defaults
    assert settings.updated({"sandbox.two-word.level": 5}).sandbox.section(
        two_word).level == 5
    shown = json.loads(cli(tmp_path, "config", "show", "--json").stdout)
    assert shown["sandbox"]["two_word"]["level"] == {"value": 3, "source": f"file:{config}"}
    assert shown["sandbox"]["docker"]["memory"] == {"value": "16g", "source": "default"}
    one_line_error(cli(tmp_path, "runs", A2RL_SANDBOX__TWO_WORD__LEVEL="-1"),
                   "A2RL_SANDBOX__TWO_WORD__LEVEL=-1", "greater than or equal to 0")
    config.write_text("[sandbox.two-word]\nlevle = 3\n")
    one_line_error(cli(tmp_path, "runs"), "'sandbox.two_word.levle' is not a setting",
                   "did you mean 'sandbox.two_word.level'")
    config.write_text("[sandbox.bare]\nlevel = 3\n")
    one_line_error(cli(tmp_path, "runs"), "sandbox.bare.level = 3",
                   "sandbox backend 'bare' has no settings")
    config.write_text("[sandbox.vm]\nlevel = 3\n")
    one_line_error(cli(tmp_path, "runs"), "sandbox.vm.level = 3", "[sandbox.vm] is no sandbox "
                   "backend's table (use 'local', 'docker', 'two-word' or 'bare')")
    config.unlink()
    one_line_error(cli(tmp_path, "runs", A2RL_GRADING__WARP__SPEED="9"),
                   "A2RL_GRADING__WARP__SPEED='9'", "[grading.warp] is no grading engine's "
                   "table", "'transformers'")
    one_line_error(cli(tmp_path, "runs", A2RL_GRADING__VLLM__SPEED="9"),
                   "grading engine 'vllm' has no settings")


def test_updated_checks_dotted_paths_and_a_flat_copy_is_refused() -> None:
    base = Settings()
    moved = base.updated({"sandbox.docker.memory": "1g", "grading.max_new_tokens": 4})
    assert (moved.sandbox.section(DockerSettings).memory, moved.grading.max_new_tokens) == ("1g", 4)
    assert base.sandbox.section(DockerSettings).memory == "16g"  # a copy
    with pytest.raises(KeyError):
        base.updated({"sandbox.docker.memroy": "1g"})
    with pytest.raises(ValueError, match="not a size"):
        base.updated({"sandbox.docker.memory": "lots"})
    with pytest.raises(KeyError, match="docker_memory"):  # would be set and read by nothing
        base.model_copy(update={"docker_memory": "1g"})


def test_config_migrate_moves_flat_names_into_sections_and_keeps_a_backup(
        tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    old = ('# mine\nbase_model = "tiny-llama"\nhttp_port = 9001\ndocker_memory = "8g"\n'
           '[model_prices."vendor/m.1"]\ninput = 1\noutput = 2\n[tasks.arith]\nn = 3\n')
    config.write_text(old)
    before = load_settings(environ={"A2RL_HOME": str(tmp_path)}, warn=False)[0]
    done = cli(tmp_path, "config", "migrate")
    assert done.exit_code == 0, done.output
    assert "http_port to server.port" in done.stdout and "config.toml.bak" in done.stdout
    assert (tmp_path / "config.toml.bak").read_text() == old
    text = config.read_text()
    assert "[server]\nport = 9001" in text and '[sandbox.docker]\nmemory = "8g"' in text
    assert "http_port" not in text and "model_prices" not in text
    after = load_settings(environ={"A2RL_HOME": str(tmp_path)})[0]
    assert after.model_dump() == before.model_dump()
    again = cli(tmp_path, "config", "migrate")
    assert again.exit_code == 0 and "nothing to migrate" in again.stdout
    config.write_text("http_port = 99999\n")  # an error: refused, the file as it was
    one_line_error(cli(tmp_path, "config", "migrate"), "not migrated", "http_port = 99999")
    assert config.read_text() == "http_port = 99999\n"
    config.write_text("http_port = [\n")
    one_line_error(cli(tmp_path, "config", "migrate"), "not migrated", "TOML")


def test_config_show_prints_the_sections(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[sandbox.docker]\nmemory = "8g"\n')
    shown = cli(tmp_path, "config", "show")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert "[]" not in lines and lines[0].startswith("home ")  # the top's settings first
    docker = lines.index("[sandbox.docker]")
    assert any(line.startswith("memory") and "8g" in line and "[file:" in line
               for line in lines[docker:docker + 6])
    for table in ("[server]", "[server.services]", "[recording]", "[sandbox]",
                  "[sandbox.local]", "[grading]", "[judge]", "[narrative]"):
        assert table in lines, table
