"""The tasks of a parsed task file or playbook, for tests that read what a role or play runs."""

from __future__ import annotations


def every_task(node) -> list[dict]:
    """Every task in a parsed task list or playbook, blocks and handlers included."""
    found = []
    if isinstance(node, list):
        for item in node:
            found += every_task(item)
    elif isinstance(node, dict):
        if any(k in node for k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")):
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                found += every_task(node.get(key))
        if "name" in node or any("." in str(k) for k in node):
            found.append(node)
    return found
