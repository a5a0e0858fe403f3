"""A platform without a play is refused in preflight (preflight_fleet.platforms_with_play)."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.action.preflight_fleet import _no_play, platforms_with_play


def test_this_collection_has_a_play_for_compose():
    assert "compose" in platforms_with_play()


def test_only_imported_plays_that_exist_count(tmp_path):
    site = tmp_path / "site.yml"
    site.write_text(
        "- ansible.builtin.import_playbook: compose.yml\n- ansible.builtin.import_playbook: kubernetes.yml\n"
    )
    (tmp_path / "compose.yml").write_text("---\n")
    assert platforms_with_play(site) == ["compose"]
    (tmp_path / "kubernetes.yml").write_text("---\n")
    assert platforms_with_play(site) == ["compose", "kubernetes"]
    assert platforms_with_play(tmp_path / "missing.yml") == []


def test_no_play_message_names_the_platform_and_the_fix():
    decision = _no_play({"ok": True, "platform": "kubernetes", "source": "auto", "reason": "24 GPUs"}, ["compose"])
    assert decision["ok"] is False
    assert "the fleet's platform is kubernetes (24 GPUs), but no play applies kubernetes" in decision["reason"]
    assert "set gpuops_platform to compose" in decision["reason"]
