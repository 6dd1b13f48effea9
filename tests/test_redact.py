"""Secrets never leave the host: redaction by name and by value, with real-world variable names and value shapes."""

from __future__ import annotations

import json

import pytest

from nccl_doctor.probe.environment import relevant, relevant_env
from nccl_doctor.redact import REDACTED, redact, redact_text, secret_name

SECRET_NAMES = [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "GH_TOKEN", "GITLAB_PRIVATE_TOKEN",
    "CI_JOB_TOKEN", "DB_PASSWORD", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "NEPTUNE_API_TOKEN",
    "COMET_API_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_SAS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "GCP_SERVICE_ACCOUNT_KEY", "SLACK_WEBHOOK_URL",
    "DOCKER_PASSWORD", "REGISTRY_AUTH", "NGC_API_KEY", "NGC_CLI_API_KEY", "PGPASSWORD", "MYSQL_PWD", "REDIS_PASSWD",
    "SECRET_KEY", "DJANGO_SECRET_KEY", "JWT_SECRET", "SESSION_COOKIE", "PRIVATE_KEY", "SSH_PRIVATE_KEY",
    "KAGGLE_KEY", "REPLICATE_API_TOKEN", "COHERE_API_KEY", "PINECONE_API_KEY", "TORCH_HUB_TOKEN",
    "NCCL_SECRET_SAUCE_TOKEN", "SLURM_JOB_CREDENTIALS", "MASTER_PASSWORD", "GLOO_AUTH_KEY",
]

NOT_SECRET_NAMES = [
    "NCCL_IB_PKEY", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "PWD", "OLDPWD",
    "SSH_AUTH_SOCK", "GLOO_DEVICE_TRANSPORT_TCP_TLS_PKEY", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "SLURM_JOB_ID", "KEYBOARD", "MONKEY_LEVEL",
]

SECRET_VALUES = [
    "AKIAIOSFODNN7EXAMPLE",  # AWS access key id (AWS docs example)
    "ASIAY34FZKBOKMUTVV7A",
    "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "ghp_1234567890abcdefghijABCDEFGHIJ123456",
    "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV",
    "glpat-xxxxxxxxxxxxxxxxxxxx",
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AIzaSyD-1234567890abcdefghijklmnopqrstu",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "0123456789abcdef0123456789abcdef01234567",  # a W&B API key: 40 hex characters
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # AWS secret key shape (AWS docs example)
    "-----BEGIN RSA PRIVATE KEY-----MIIEpAIBAAKCAQEA",
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4;EndpointSuffix=core.windows.net",
    "https://example.blob.core.windows.net/c/f?sv=2021-06-08&sig=AbCdEf0123456789%2BxyZ",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_are_redacted(name):
    assert secret_name(name)
    assert redact(name, "plain-looking-value") == REDACTED


@pytest.mark.parametrize("name", NOT_SECRET_NAMES)
def test_ordinary_names_keep_their_value(name):
    assert not secret_name(name)
    assert redact(name, "eth0") == "eth0"


@pytest.mark.parametrize("value", SECRET_VALUES)
def test_secret_looking_values_are_redacted_under_any_name(value):
    shown = redact("NCCL_SOME_SETTING", value)
    assert REDACTED in shown
    for chunk in ("IOSFODNN7", "aBcDeFgHiJ", "1234567890abcdefghij", "xxxxxxxxxxxx", "AbCdEfGhIjKl", "abcdefghijklmnop",
                  "dozjgNryP4J3jVmNHl0w5N", "0123456789abcdef0123", "K7MDENG", "MIIEpAIBAAKCAQEA", "Zm9vYmFyYmF6cXV4",
                  "AbCdEf0123456789"):
        if chunk in value:
            assert chunk not in shown, (value, shown)


def test_url_credentials_keep_the_host():
    shown = redact("MASTER_ADDR", "postgres://trainer:hunter2@db.internal:5432/runs")
    assert "hunter2" not in shown and "trainer" not in shown and "db.internal:5432/runs" in shown


@pytest.mark.parametrize("value", [
    "eth0", "^docker,lo", "mlx5_0:1,mlx5_1:1", "INFO", "/usr/local/cuda/lib64:/opt/nccl/lib", "10.1.0.11",
    "GPU-0a1b2c3d-1234-5678-9abc-def012345678", "/tmp/nccl_trace_rank_", "node[001-064]", "8(x2)",
    "/nix/store/q3ixs7b6ydzbvw1kf8mdwn1h5lqb5yvc-python3/lib", "ring,collnetdirect;allreduce:tree",
])
def test_ordinary_values_are_untouched(value):
    assert redact("NCCL_X", value) == value


def test_only_relevant_variables_are_shown():
    env = {"NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_x", "HOME": "/root", "PATH": "/bin", "MASTER_ADDR": "10.0.0.1",
           "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567", "SLURM_JOB_ID": "42", "RANK": "0",
           "NCCL_IB_HCA": "mlx5", "CUDA_VISIBLE_DEVICES": "0,1", "OMPI_COMM_WORLD_RANK": "3",
           "TORCH_NCCL_TOKEN": "secret-value-123"}
    shown = relevant_env(env)
    assert set(shown) == {"NCCL_DEBUG", "MASTER_ADDR", "SLURM_JOB_ID", "RANK", "NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES",
                          "OMPI_COMM_WORLD_RANK", "TORCH_NCCL_TOKEN"}
    assert shown["TORCH_NCCL_TOKEN"] == REDACTED
    assert "secret-value-123" not in json.dumps(shown)
    assert list(shown) == sorted(shown)
    assert relevant("LD_LIBRARY_PATH") and not relevant("AWS_SECRET_ACCESS_KEY")


def test_empty_values_stay_empty():
    assert redact("HF_TOKEN", "") == ""


def test_no_known_nccl_or_torch_variable_is_taken_for_a_secret():
    from nccl_doctor.catalog.env_vars import env_vars

    assert [name for name in env_vars() if secret_name(name)] == []


# ------------------------------------------------------------------ free text: every command's output

# (where the secret sits, the secret's part that must never be printed)
FAKE_SECRETS = [
    ("pulling https://trainer:hunter2-Pass@registry.example.com/v2/ failed", "hunter2-Pass"),
    ("mlflow: postgres://admin:s3cr3tPw@db.internal:5432/runs", "s3cr3tPw"),
    ("curl -H 'Authorization: Bearer abcDEF123456ghiJKL789' https://api.example.com", "abcDEF123456ghiJKL789"),
    ("request headers: Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("proxy said Bearer eyJhbGciOiJub25lIn0.fake.token-xyz", "eyJhbGciOiJub25lIn0"),
    ("train.py --lr 3e-4 --password hunter2hunter2 --epochs 3", "hunter2hunter2"),
    ("launch --hf-token=qwertyuiop12345 --model llama", "qwertyuiop12345"),
    ("launch --api_key zxcvbnm0987 --dry-run", "zxcvbnm0987"),
    ("git clone https://ghp_1234567890abcdefghijABCDEFGHIJ123456@github.com/o/r", "1234567890abcdefghijABCDEFGHIJ"),
    ("token github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV in use",
     "abcdefghijkl_mnopqrstuvwxyz"),
    ("slack notify with xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOpQrStUvWx"),
    ("posting to https://hooks.slack.com/services/T0000FAKE/B0000FAKE/FakeWebhookSecret123", "FakeWebhookSecret123"),
    ("HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 huggingface-cli login", "aBcDeFgHiJkLmNoPqRsTuVwXyZ"),
    ("wandb: WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789"),
    ("boto3 creds AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "K7MDENG"),
    ('config {"password": "pa55-word", "user": "me"}', "pa55-word"),
    ("secret_token: mytok3n-value retrying", "mytok3n-value"),
    ("-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAAtzc2gtZWQyNTUxOQAAACBvZmFrZQ -----END OPENSSH "
     "PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAAtzc2gtZWQyNTUxOQ"),
]
KEY_LINES = ["-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0",
             "Pz9Kq3vYx7LmN2wQeR5tUi8oPa1sDf4gHj6kLz0xCv3bNm9QwErTy7uIo2pAs5dFg8hJk1lZx4cVb6nM0qWe3rTy", "-----END RSA PRIVATE KEY-----"]
NOT_SECRETS = ["connect to 10.1.0.11:29500 failed", "--nproc-per-node 8 --nnodes 2", "NCCL_SOCKET_IFNAME=eth0",
               "KEY=VALUE line", "wait for key default_pg/0/cuda", "https://github.com/NVIDIA/nccl/issues/1234",
               "git version: 1.2.3", "--max-steps 100", "Timeout(ms)=600000"]


@pytest.mark.parametrize("text, secret", FAKE_SECRETS)
def test_free_text_secrets_are_redacted(text, secret):
    shown = redact_text(text)
    assert secret not in shown and REDACTED in shown, shown
    assert redact_text(shown) == shown  # idempotent: renderers may meet a string twice


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_free_text_without_secrets_is_untouched(text):
    assert redact_text(text) == text


def test_url_credentials_keep_scheme_host_and_path():
    assert redact_text("https://u:p4ss@host.example:8443/a/b?c=1") == "https://<redacted>@host.example:8443/a/b?c=1"


def _no_secret_in(output: str) -> None:
    for _, secret in FAKE_SECRETS:
        assert secret not in output, secret
    for line in KEY_LINES[1:3]:
        assert line[10:40] not in output


def test_no_command_output_of_logs_prints_a_secret(cli, tmp_path):
    """Every secret in evidence, unrecognised lines and each rank's last line: text, JSON, Markdown and HTML."""
    from nccl_doctor.logs import diagnose_paths
    from nccl_doctor.render.html import render_html

    timeout = ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [Rank 0] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600003 "
               "milliseconds before timing out. {}")
    found = tmp_path / "found"
    found.mkdir()
    (found / "rank0.log").write_text("\n".join(timeout.format(text) for text, _ in FAKE_SECRETS) + "\n")
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "rank1.log").write_text("".join(f"[rank1]: RuntimeError: {text}\n" for text, _ in FAKE_SECRETS)
                                       + "".join(f"[rank1]: {line}\n" for line in KEY_LINES[:3]))
    for folder in (found, unknown):
        for form in ([], ["--json"], ["--markdown"]):
            done = cli("logs", *form, str(folder))
            assert done.returncode in (0, 1), done.stderr
            _no_secret_in(done.stdout + done.stderr)
        _no_secret_in(render_html(diagnose_paths([str(folder)])))
    assert "<redacted>" in cli("logs", str(unknown)).stdout


def test_no_output_of_env_and_lint_prints_a_secret(cli, tmp_path):
    env = {"NCCL_DEBUG_FILE": "https://trainer:hunter2-Pass@registry.example.com/v2/",
           "NCCL_SOCKET_IFNAME": "--password hunter2hunter2", "TORCH_EXTENSIONS_DIR": "/tmp/ghp_1234567890abcdefghij"
           "ABCDEFGHIJ123456", "MASTER_ADDR": "Authorization: Bearer abcDEF123456ghiJKL789",
           "NCCL_IB_HCA": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"}
    for args in (["env"], ["env", "--json"], ["lint"], ["lint", "--json"]):
        done = cli(*args, env=env, timeout=120)
        assert done.returncode in (0, 1), done.stderr
        _no_secret_in(done.stdout + done.stderr)
    env_file = tmp_path / "job.env"
    env_file.write_text("".join(f"NCCL_X{i}={text}\n" for i, (text, _) in enumerate(FAKE_SECRETS)))
    for args in (["lint", "--env-file", str(env_file)], ["lint", "--json", "--env-file", str(env_file)]):
        done = cli(*args, timeout=120)
        _no_secret_in(done.stdout + done.stderr)


def test_a_host_name_made_of_hex_segments_is_not_a_secret():
    host = "NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0"
    assert redact_text(f"{host}:97:221 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>").startswith(host)
    assert "REDACTED" not in redact_text("compute-st-p4de24xlarge-2.cluster.internal") \
        and "redacted" not in redact_text("compute-st-p4de24xlarge-2.cluster.internal")


# ---------------------------------------------------------------- the screen

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nccl_doctor.redact import could_hide_a_secret, redact_everything  # noqa: E402

FRAGMENTS = [
    "--password hunter2", "--hf-token=abc", "HF_TOKEN=hf_" + "a" * 34, "AKIA" + "B" * 16, "ANPA" + "C" * 16,
    "ghp_" + "x" * 36, "https://user:pw@host/x", "Authorization: Bearer abcdefgh12345678", "bearer abcdefgh1234",
    "hooks.slack.com/services/T0/B0/xyz", "-----BEGIN RSA PRIVATE KEY-----", "eyJhbGciOi.eyJzdWIiOi.sig12345",
    "AIza" + "d" * 35, "sk-proj-" + "e" * 24, "xoxb-1234567890-abc", "glpat-" + "f" * 22, '"api_key": "v"',
    "token: abc", "DB_CONNECTIONSTRING=Server=x", "MY_SAS=sv=2020", "a" * 40, "0123456789abcdef" * 3,
    "NCCL INFO AllReduce: opCount 1f count 1024 [nranks=8]", "rank 3 ", "NCCL_SOCKET_IFNAME=eth0", " ", "=", ":",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=6))
def test_the_screen_never_lets_a_secret_through(parts):
    """redact_text skips the rules only for text none of them could change."""
    text = "".join(parts)
    assert redact_text(text) == redact_everything(text)


def test_the_screen_lets_plain_log_lines_through_untouched():
    line = ("gpu-node00:1234:1240 [0] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f5e8c000000 recvbuff "
            "0x7f5e8c000000 count 262144 datatype 7 op 0 root 0 comm 0x55d0c6a1e2b0 [nranks=64] stream 0x55d0c69f8e40")
    assert not could_hide_a_secret(line)
    assert redact_text(line) == line
