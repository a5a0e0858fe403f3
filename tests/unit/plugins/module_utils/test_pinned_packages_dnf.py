"""pinned_packages_dnf: version requests against offered RPM versions, versionlock entries and their state.

rpm's own comparison runs on the host (dnf's sack); here a plain tuple order stands in for it, which agrees with
rpm on the simple versions these cases use.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages_dnf as ppd

OFFERED = [("0", "1.0", "1"), ("0", "1.0", "2"), ("0", "1.1", "1")]
LOCKLIST = """# Added locks on Tue Dec  1 14:00:00 2026
gpuops-demo-tool-0:1.0-1.*
gpuops-demo-lib-0:1.0-1.*
!gpuops-demo-data-0:1.1-1.*
nvidia-driver-3:570.86.15-1.el9.*
"""


def cmp(a, b):
    def key(evr):
        return (int(evr[0]), [int(part) for part in evr[1].split(".")], [int(part) for part in evr[2].split(".")])
    return (key(a) > key(b)) - (key(a) < key(b))


def test_a_bare_version_takes_the_newest_release_of_it() -> None:
    assert ppd.choose(OFFERED, "1.0", None, cmp) == ("0", "1.0", "2")


def test_a_version_with_release_must_match_exactly() -> None:
    assert ppd.choose(OFFERED, "1.0-1", None, cmp) == ("0", "1.0", "1")
    assert ppd.choose(OFFERED, "1.0-3", None, cmp) is None


def test_an_epoch_must_match_when_given() -> None:
    assert ppd.choose(OFFERED, "0:1.1-1", None, cmp) == ("0", "1.1", "1")
    assert ppd.choose(OFFERED, "1:1.1-1", None, cmp) is None


def test_an_empty_request_keeps_the_installed_version_else_the_newest() -> None:
    assert ppd.choose(OFFERED, "", ("0", "1.0", "1"), cmp) == ("0", "1.0", "1")
    assert ppd.choose(OFFERED, "", ("0", "0.9", "1"), cmp) == ("0", "1.1", "1")


def test_specs_and_lock_entries_are_what_dnf_takes_and_writes() -> None:
    assert ppd.nevr("tool", ("0", "1.0", "1")) == "tool-1.0-1"
    assert ppd.nevr("driver", ("3", "570.86.15", "1.el9")) == "driver-3:570.86.15-1.el9"
    assert ppd.lock_entry("tool", ("0", "1.0", "1")) == "tool-0:1.0-1.*"


def test_the_lock_list_is_read_without_comments_and_excludes() -> None:
    locks = ppd.read_locklist(LOCKLIST)
    assert sorted(locks) == ["gpuops-demo-lib", "gpuops-demo-tool", "nvidia-driver"]
    assert locks["nvidia-driver"] == [("nvidia-driver-3:570.86.15-1.el9.*", ("3", "570.86.15", "1.el9"))]


def test_a_lock_at_another_version_is_stale_and_a_missing_one_is_not_locked() -> None:
    resolved = {"gpuops-demo-tool": ("0", "1.1", "1"), "gpuops-demo-lib": ("0", "1.0", "1"),
                "gpuops-demo-data": ("0", "1.0", "1")}
    locked, stale = ppd.lock_state(resolved, ppd.read_locklist(LOCKLIST))
    assert locked == ["gpuops-demo-lib"]
    assert stale == ["gpuops-demo-tool-0:1.0-1.*"]


def test_rpmlib_file_and_rich_requirements_are_not_pins() -> None:
    assert ppd.ignored_requirement("rpmlib(CompressedFileNames) <= 3.0.4-1")
    assert ppd.ignored_requirement("/bin/sh")
    assert ppd.ignored_requirement("(kmod-nvidia if kernel)")
    assert not ppd.ignored_requirement("gpuops-demo-lib = 1.0-1")
    assert ppd.requirement_is_exact("gpuops-demo-lib = 1.0-1")
    assert not ppd.requirement_is_exact("gpuops-demo-data >= 1.0")
