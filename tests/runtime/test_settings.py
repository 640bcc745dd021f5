"""Settings: defaults, TOML file, AUTARCH_* variables and flags, in that order of precedence."""

from __future__ import annotations

import msgspec
import pytest

from autarch.runtime.eventstore import event_store_env
from autarch.runtime.settings import (
    SECRET_SETTINGS,
    SERVICE_SETTINGS,
    CommonSettings,
    GatewaySettings,
    OrchestratorSettings,
    Settings,
    SettingsError,
    ToolsSettings,
    load_settings,
    narrow,
)


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
    assert env["PERSISTENCE_MODULE"] == "autarch.runtime.sqlite_store"
    assert env["SQLITE_DBNAME"] == str(tmp_path / "orchestrator" / "events.sqlite")
    assert env["SQLITE_SYNCHRONOUS"] == "normal"  # commits without fsync; the relay syncs before publishing


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


def test_each_service_gets_only_its_own_settings(tmp_path):
    s = load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_EXA_API_KEY": "k",
                               "AUTARCH_DRIVE_WORKFLOWS": "false", "AUTARCH_REQUEST_TIMEOUT": "4"})
    tools = s.for_service("tools")
    assert isinstance(tools, ToolsSettings) and tools.exa_api_key == "k" and tools.request_timeout == 4.0
    assert not hasattr(tools, "drive_workflows") and not hasattr(tools, "git_author_name")
    orchestrator = narrow(s, OrchestratorSettings)
    assert orchestrator.drive_workflows is False and not hasattr(orchestrator, "exa_api_key")
    assert narrow(orchestrator, OrchestratorSettings) is orchestrator
    for name, cls in SERVICE_SETTINGS.items():  # every service field is in the aggregate, so in the one loader
        assert type(s.for_service(name)) is cls
        assert {f.name for f in msgspec.structs.fields(cls)} <= {f.name for f in msgspec.structs.fields(Settings)}
    assert {f.name for f in msgspec.structs.fields(CommonSettings)} <= {
        f.name for f in msgspec.structs.fields(GatewaySettings)}


def test_the_keys_that_bypassed_the_loader_are_settings_now(tmp_path):
    env = {"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_EMBEDDING_API_KEY": "e", "AUTARCH_WEAVIATE_API_KEY": "w",
           "AUTARCH_EXPECTED_SERVICES": "orchestrator,tools"}
    s = load_settings(environ=env)
    indexer = s.for_service("indexer")
    assert (indexer.embedding_api_key, indexer.weaviate_api_key) == ("e", "w")
    assert s.for_service("gateway").expected_services == ("orchestrator", "tools")


def test_loop_and_notifier_settings(tmp_path):
    s = load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path)})
    loop = s.for_service("orchestrator")
    assert (loop.loop_iteration_timeout, loop.loop_no_progress_limit, loop.loop_max_iterations_limit,
            loop.loop_memory_timeout) == (300.0, 3, 200, 2.0)
    notifier = s.for_service("notifier")
    assert notifier.notify_webhooks == () and notifier.notify_telegram_token is None
    assert (notifier.notify_max_attempts, notifier.notify_backoff_initial, notifier.notify_backoff_max,
            notifier.notify_timeout) == (8, 0.5, 30.0, 10.0)
    assert notifier.notify_telegram_base_url == "https://api.telegram.org"
    env = {"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_NOTIFY_WEBHOOKS": "http://a/x, http://b/y",
           "AUTARCH_NOTIFY_TELEGRAM_TOKEN": "123:abc", "AUTARCH_LOOP_ITERATION_TIMEOUT": "12.5"}
    s = load_settings(environ=env)
    assert s.notify_webhooks == ("http://a/x", "http://b/y") and s.loop_iteration_timeout == 12.5
    assert load_settings(environ=s.to_env()).notify_webhooks == ("http://a/x", "http://b/y")
    assert "notify_telegram_token" in SECRET_SETTINGS
    with pytest.raises(SettingsError, match="loop_no_progress_limit must be 1 or more"):
        load_settings(environ={**env, "AUTARCH_LOOP_NO_PROGRESS_LIMIT": "0"})
    with pytest.raises(SettingsError, match="loop_memory_timeout must be positive"):
        load_settings(environ={**env, "AUTARCH_LOOP_MEMORY_TIMEOUT": "0"})


def test_discord_sms_and_telegram_command_settings(tmp_path):
    notifier = load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path)}).for_service("notifier")
    assert (notifier.notify_discord_base_url, notifier.notify_discord_bot_token) == ("https://discord.com/api/v10",
                                                                                      None)
    assert (notifier.notify_sms_base_url, notifier.notify_sms_account_sid, notifier.notify_sms_auth_token,
            notifier.notify_sms_from) == ("https://api.twilio.com", None, None, None)
    assert (notifier.notify_telegram_allowed_chats, notifier.notify_telegram_projects,
            notifier.notify_telegram_poll_timeout) == ((), (), 30)
    assert {"notify_discord_bot_token", "notify_sms_auth_token"} <= SECRET_SETTINGS
    env = {"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_NOTIFY_TELEGRAM_ALLOWED_CHATS": "42, -1001",
           "AUTARCH_NOTIFY_TELEGRAM_PROJECTS": "/srv/shop,/srv/web/"}
    s = load_settings(environ=env)
    assert s.notify_telegram_allowed_chats == ("42", "-1001")
    assert load_settings(environ=s.to_env()).notify_telegram_projects == ("/srv/shop", "/srv/web/")
    for name, value, words in (("ALLOWED_CHATS", "@mychannel", "numeric chat ids"),
                               ("ALLOWED_CHATS", "--5", "numeric chat ids"),
                               ("PROJECTS", "shop", "absolute paths"), ("PROJECTS", "/", "absolute paths"),
                               ("PROJECTS", "/a/shop,/b/shop", "names 'shop' twice"),
                               ("POLL_TIMEOUT", "0", "between 1 and 60")):
        with pytest.raises(SettingsError, match=words):
            load_settings(environ={**env, f"AUTARCH_NOTIFY_TELEGRAM_{name}": value})


def test_config_never_prints_a_secret(tmp_path, capsys):
    from autarch.cli.main import main

    env = {"AUTARCH_DATA_DIR": str(tmp_path), **{f"AUTARCH_{name.upper()}": "s3cret" for name in SECRET_SETTINGS}}
    env["AUTARCH_POSTGRES_URL"] = "postgresql://u:s3cret@h:5432/d"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out and '"notify_telegram_token": "***"' in out
