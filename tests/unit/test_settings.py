"""Settings: defaults, TOML file, AUTARCH_* variables and flags, in that order of precedence."""

from __future__ import annotations

import pytest

from autarch.runtime.eventstore import event_store_env
from autarch.runtime.settings import SettingsError, load_settings


def test_defaults(tmp_path):
    s = load_settings(environ={"HOME": str(tmp_path)})
    assert s.data_dir == str(tmp_path / ".local" / "share" / "autarch")
    assert (s.port, s.nats_url, s.postgres_url) == (8765, None, None)
    assert s.effective_nats_url == f"nats://127.0.0.1:{s.nats_port}"


def test_precedence_file_then_env_then_flags(tmp_path):
    (tmp_path / "config.toml").write_text('port = 9000\nlog_level = "DEBUG"\nrequest_timeout = 3.5\n')
    env = {"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_PORT": "9100"}
    s = load_settings(environ=env)
    assert (s.port, s.log_level, s.request_timeout) == (9100, "DEBUG", 3.5)
    assert load_settings({"port": 9200}, environ=env).port == 9200


def test_the_sdk_variables_are_a_fallback_for_the_model_settings(tmp_path):
    env = {"AUTARCH_DATA_DIR": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": "http://p"}
    s = load_settings(environ=env)
    assert (s.anthropic_api_key, s.anthropic_base_url) == ("sk-ant-test", "http://p")
    s = load_settings(environ={**env, "AUTARCH_ANTHROPIC_BASE_URL": "http://scripted"})
    assert s.anthropic_base_url == "http://scripted"  # Autarch's own variable wins
    assert load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path)}).anthropic_api_key is None


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("", {"AUTARCH_PORT": "eighty"}, "port"),
        ("", {"AUTARCH_PORT": "70000"}, "port must be between"),
        ("colour = 1\n", {}, "unknown settings colour"),
        ("port = [\n", {}, "config.toml"),
        ("", {"AUTARCH_REQUEST_TIMEOUT": "-1"}, "request_timeout must be positive"),
        ("", {"AUTARCH_RESTART_GRACE": "-1"}, "restart_grace must be 0 or more"),
    ],
)
def test_bad_values_name_the_setting(tmp_path, toml, env, message):
    (tmp_path / "config.toml").write_text(toml)
    with pytest.raises(SettingsError, match=message):
        load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path), **env})


def test_event_store_defaults_to_sqlite_in_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    env = event_store_env(load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path)}), "orchestrator")
    assert env["PERSISTENCE_MODULE"] == "eventsourcing.sqlite"
    assert env["SQLITE_DBNAME"] == str(tmp_path / "orchestrator" / "events.sqlite")


def test_postgres_url_is_translated_to_eventsourcing_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("PERSISTENCE_MODULE", raising=False)
    s = load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path),
                               "AUTARCH_POSTGRES_URL": "postgresql://ada:s%40cret@db.local:6543/autarch"})
    env = event_store_env(s, "orchestrator")
    assert env["PERSISTENCE_MODULE"] == "eventsourcing.postgres"
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"], env["POSTGRES_DBNAME"]) == ("db.local", "6543", "autarch")
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"]) == ("ada", "s@cret")
    with pytest.raises(SettingsError, match="postgres_url"):
        event_store_env(load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path),
                                               "AUTARCH_POSTGRES_URL": "mysql://x/y"}), "orchestrator")


def test_sandbox_settings_from_toml_and_comma_separated_variables(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.toml").write_text('sandbox_read_paths = ["~/.cargo"]\nsandbox_network_ports = [443]\n')
    settings = load_settings(environ={"AUTARCH_DATA_DIR": str(data), "AUTARCH_SANDBOX_ENV": "GOPATH, CARGO_HOME"})
    assert settings.sandbox == "on" and settings.sandbox_network is False
    assert settings.sandbox_read_paths == ("~/.cargo",) and settings.sandbox_network_ports == (443,)
    assert settings.sandbox_env == ("GOPATH", "CARGO_HOME")
    assert load_settings(environ=settings.to_env()).sandbox_env == ("GOPATH", "CARGO_HOME")
    with pytest.raises(SettingsError, match='sandbox must be "on" or "off"'):
        load_settings(environ={"AUTARCH_DATA_DIR": str(data), "AUTARCH_SANDBOX": "maybe"})
    with pytest.raises(SettingsError, match="sandbox_network_ports must be between 1 and 65535"):
        load_settings(environ={"AUTARCH_DATA_DIR": str(data), "AUTARCH_SANDBOX_NETWORK_PORTS": "0,80"})
