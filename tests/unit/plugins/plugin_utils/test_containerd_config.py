"""containerd_config.systemd_cgroup_on on real config.toml texts (fixtures/containerd/SOURCES.md): only runc's
SystemdCgroup changes, the result is valid TOML (the old regex edit wrote a key containerd 1.7 refused: "keys
cannot contain \\ character"), and a second pass changes nothing."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import tomllib
from ansible_collections.gpuops.cluster.plugins.filter.kube import containerd_config
from ansible_collections.gpuops.cluster.plugins.plugin_utils import containerd_config as cc

FIXTURES = Path(__file__).parent / "fixtures" / "containerd"
V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"


def fixture(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def runc(parsed, plugin):
    return parsed["plugins"][plugin]["containerd"]["runtimes"]["runc"]


def changed_lines(old, new):
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


@pytest.mark.parametrize(
    ("name", "plugin", "version"),
    [("trixie-containerd-1.7.24-config-default.toml", V2, 2), ("sid-containerd-2.1.9-config-default.toml", V3, 3)],
)
def test_config_default_flips_the_one_line(name, plugin, version):
    old = fixture(name)
    assert cc.config_version(old) == version
    assert runc(tomllib.loads(old), plugin)["options"]["SystemdCgroup"] is False
    new = cc.systemd_cgroup_on(old)
    assert runc(tomllib.loads(new), plugin)["options"]["SystemdCgroup"] is True
    diff = changed_lines(old, new)
    assert diff == [diff[0], "+" + diff[0][1:].replace("false", "true")]
    assert diff[0].endswith("SystemdCgroup = false")
    assert cc.systemd_cgroup_on(new) == new


def test_debians_shipped_config_gets_the_runc_tables_appended():
    old = fixture("trixie-containerd-1.7.24-etc-config.toml")
    new = cc.systemd_cgroup_on(old)
    assert new.startswith(old)
    parsed = tomllib.loads(new)
    assert runc(parsed, V2) == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert parsed["plugins"][V2]["cni"]["bin_dir"] == "/usr/lib/cni"
    assert "\\" not in new
    assert cc.systemd_cgroup_on(new) == new


def test_runc_table_present_options_missing_gets_only_the_options_table():
    old = f'version = 2\n[plugins."{V2}".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
    new = cc.systemd_cgroup_on(old)
    assert new.count("runtime_type") == 1
    assert runc(tomllib.loads(new), V2)["options"] == {"SystemdCgroup": True}


def test_options_table_without_the_key_gets_it_after_the_header():
    old = f'version = 3\n\n[plugins."{V3}".containerd.runtimes.runc.options]\n  BinaryName = ""\n'
    new = cc.systemd_cgroup_on(old)
    assert new.splitlines()[3] == "  SystemdCgroup = true"
    assert runc(tomllib.loads(new), V3)["options"] == {"BinaryName": "", "SystemdCgroup": True}


def test_other_runtimes_and_comments_are_left_alone():
    old = (
        "# kept comment\nversion = 2\n"
        f"[ plugins . '{V2}' . containerd.runtimes.runc.options ]  # spaced, literal-quoted\n"
        "    SystemdCgroup=false # why\n"
        f'[plugins."{V2}".containerd.runtimes.other.options]\n    SystemdCgroup = false\n'
    )
    new = cc.systemd_cgroup_on(old)
    assert "    SystemdCgroup=true # why\n" in new
    assert new.endswith("other.options]\n    SystemdCgroup = false\n")
    assert new.startswith("# kept comment\n")
    assert tomllib.loads(new)["plugins"][V2]["containerd"]["runtimes"]["other"]["options"]["SystemdCgroup"] is False


def test_already_on_is_returned_unchanged():
    text = f'version = 2\n[plugins."{V2}".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
    assert cc.systemd_cgroup_on(text) is text


def test_array_of_tables_ends_the_options_table():
    old = f'version = 2\n[plugins."{V2}".containerd.runtimes.runc.options]\n[[x]]\n  SystemdCgroup = false\n'
    new = cc.systemd_cgroup_on(old)
    assert new.splitlines()[2] == "  SystemdCgroup = true"
    assert new.endswith("[[x]]\n  SystemdCgroup = false\n")


@pytest.mark.parametrize("text", ["", "[plugins]\n", "version = 1\n"])
def test_config_version_1_is_refused_with_the_fix(text):
    with pytest.raises(ValueError, match=r"version = 1: expected 2 .*containerd config migrate"):
        cc.systemd_cgroup_on(text)


def test_split_key():
    assert cc.split_key(f'plugins."{V2}".containerd') == ("plugins", V2, "containerd")
    assert cc.split_key(" a . 'b.c' ") == ("a", "b.c")
    assert cc.split_key("a..b") is None
    assert cc.split_key('a."b') is None


GLOB = "/etc/containerd/conf.d/*.toml"


def test_imports_are_added_at_the_top_of_a_file_without_them():
    old = fixture("trixie-containerd-1.7.24-etc-config.toml")
    new = cc.with_imports(old, [GLOB], [])
    assert new.endswith(old)
    assert tomllib.loads(new)["imports"] == [GLOB]
    assert cc.with_imports(new, [GLOB], []) is new


def test_a_one_line_imports_array_is_rewritten_in_place_keeping_the_others():
    old = f'# head\nimports = ["/a.toml"]  \nversion = 2\n[plugins."{V2}".cni]\n  bin_dir = "/x"\n'
    new = cc.with_imports(old, [GLOB], [])
    assert changed_lines(old, new) == ['-imports = ["/a.toml"]  ', f'+imports = ["/a.toml", "{GLOB}"]']
    assert cc.with_imports(new, [GLOB, "/a.toml"], []) is new
    assert tomllib.loads(cc.with_imports(new, ["/b.toml"], [GLOB]))["imports"] == ["/a.toml", "/b.toml"]


def test_the_filter_edits_both_in_one_pass():
    old = fixture("trixie-containerd-1.7.24-config-default.toml")
    new = containerd_config(old, systemd_cgroup=True, imports=[GLOB])
    parsed = tomllib.loads(new)
    assert parsed["imports"] == [GLOB]
    assert runc(parsed, V2)["options"]["SystemdCgroup"] is True
    assert containerd_config(old) is old
