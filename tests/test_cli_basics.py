import json


def test_explain_prints_cause(cli):
    r = cli("explain", "shm-too-small")
    assert r.returncode == 0
    assert "--shm-size" in r.stdout and "shm_too_small" in r.stdout


def test_explain_list_and_json(cli):
    r = cli("explain", "--list")
    assert r.returncode == 0 and "duplicate-gpu" in r.stdout
    data = json.loads(cli("explain", "duplicate-gpu", "--json").stdout)
    assert data["category"] == "device_binding"


def test_unknown_cause_suggests(cli):
    r = cli("explain", "socket-ifname")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "did you mean socket-ifname-no-match" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_command_and_flag_are_one_line(cli):
    for args in (["no-such-command"], ["explain", "--no-such-flag"]):
        r = cli(*args)
        assert r.returncode == 2, args
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("nccl-doctor: error:"), r.stderr


def test_version_and_help(cli):
    assert cli("--version").returncode == 0
    r = cli("--help")
    assert r.returncode == 0 and "explain" in r.stdout
