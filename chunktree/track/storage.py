"""A forest on disk: its nodes, the JSON document ``Forest.save`` writes and everything ``load``
checks in it (``check_document``), and the journal ``save_turn`` appends one turn a line to
(``replay`` applies it when the forest is read back)."""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import STORED_UNIT_TOLERANCE, ChunktreeError, InvalidValueError, is_unit, json_loads, unicode

FORMAT, VERSION = "chunktree-forest", 1


class ForestFileError(ChunktreeError, ValueError):
    """A saved forest cannot be read."""


@dataclass
class Node:
    """One turn: its texts, a short summary, and its place (tree, branch, parent, children)."""

    id: int
    tree: int
    branch: int
    turn: int
    user: str
    assistant: str | None
    summary: str
    parent: int | None
    children: list[int] = field(default_factory=list)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> bool:
    """A string a tokenizer can take (``checks.unicode``)."""
    if not isinstance(value, str):
        return False
    try:
        unicode(value, "text")
    except InvalidValueError:
        return False
    return True


def check_document(data: dict[str, Any], dim: int) -> tuple[list[Node], np.ndarray]:
    """The nodes and vectors of a forest document, after checking everything a forest relies on:
    each node's fields and types, ids in order, every parent an earlier node of the same tree
    (so no cycle), children that match the parents, one root per tree and the tree's node list,
    anchors inside their trees, ``current`` a node (None only when empty), and finite unit vectors,
    one per node. The first bad field raises ``ForestFileError`` naming it."""
    raw_nodes, trees = data.get("nodes"), data.get("trees")
    if not isinstance(raw_nodes, list) or not isinstance(trees, list):
        raise ForestFileError("nodes and trees: missing or not lists")
    fields = {f.name for f in dataclasses.fields(Node)}
    nodes: list[Node] = []
    for i, n in enumerate(raw_nodes):
        if not isinstance(n, dict) or set(n) != fields:
            raise ForestFileError(f"nodes[{i}]: not a node (its fields must be {sorted(fields)})")
        node = Node(**n)
        bad = ("id" if node.id != i else "tree" if not _int(node.tree) or not 0 <= node.tree < len(trees)
               else "parent" if node.parent is not None and (not _int(node.parent) or not 0 <= node.parent < i
                                                             or nodes[node.parent].tree != node.tree)
               else "turn" if not _int(node.turn) else "branch" if not _int(node.branch) or node.branch < 0
               else "user" if not _text(node.user) else "summary" if not _text(node.summary)
               else "assistant" if node.assistant is not None and not _text(node.assistant)
               else "children" if not isinstance(node.children, list) else None)
        if bad:
            rule = {"id": f"must be {i}", "parent": "must be an earlier node of the same tree, or null",
                    "tree": f"must be a tree id below {len(trees)}"}.get(
                bad, "must be a string of valid Unicode (no lone surrogate)" if bad in ("user", "summary", "assistant")
                else "has the wrong type")
            raise ForestFileError(f"nodes[{i}].{bad}: {getattr(node, bad)!r:.60} {rule}")
        nodes.append(node)
    children: dict[int, list[int]] = {}
    members_of: dict[int, list[int]] = {}
    for node in nodes:
        members_of.setdefault(node.tree, []).append(node.id)
        if node.parent is not None:
            children.setdefault(node.parent, []).append(node.id)
    for node in nodes:
        expected = children.get(node.id, [])
        if node.children != expected:
            raise ForestFileError(f"nodes[{node.id}].children: {node.children!r:.60}; the nodes whose parent it is "
                                  f"are {expected!r:.60}")
    for t_id, t in enumerate(trees):
        members = members_of.get(t_id, [])
        if not isinstance(t, dict) or t.get("id") != t_id:
            raise ForestFileError(f"trees[{t_id}]: not a tree with id {t_id}")
        if t.get("nodes") != members or not members:
            raise ForestFileError(f"trees[{t_id}].nodes: {t.get('nodes')!r:.60}; the nodes of tree {t_id} are "
                                  f"{members!r:.60}")
        if sum(nodes[m].parent is None for m in members) != 1 or nodes[members[0]].parent is not None:
            raise ForestFileError(f"trees[{t_id}]: must have exactly one root, its first node")
        if t.get("anchor") not in members:
            raise ForestFileError(f"trees[{t_id}].anchor: {t.get('anchor')!r:.60} is not one of its nodes")
        if not _int(t.get("last_turn")) or not _int(t.get("branches")) or not 1 <= t["branches"] <= len(members):
            raise ForestFileError(f"trees[{t_id}]: last_turn and branches must be integers (branches 1 to its "
                                  f"{len(members)} nodes)")
        if not members[-1] <= t["last_turn"] < len(nodes):
            raise ForestFileError(f"trees[{t_id}].last_turn: {t['last_turn']!r:.60}; must be a turn from its newest "
                                  f"node {members[-1]} to the forest's last, {len(nodes) - 1}")
    current = data.get("current")
    if (current is None) != (not nodes) or (current is not None and (not _int(current) or not 0 <= current < len(nodes))):
        raise ForestFileError(f"current: {current!r:.60} must be a node id below {len(nodes)} (null only when empty)")
    try:
        raw = base64.b64decode(data.get("vectors", ""), validate=True)
    except (TypeError, ValueError) as exc:
        raise ForestFileError(f"vectors: not base64 ({exc})") from None
    if len(raw) != 4 * dim * len(nodes):
        raise ForestFileError(f"vectors: {len(raw)} bytes; {len(nodes)} nodes of {dim} float32 need {4 * dim * len(nodes)}")
    vectors = np.frombuffer(raw, dtype="<f4").reshape(len(nodes), dim)
    bad_rows = np.flatnonzero(~is_unit(vectors, STORED_UNIT_TOLERANCE))
    if bad_rows.size:
        norm = float(np.linalg.norm(vectors[bad_rows[0]]))
        raise ForestFileError(f"vectors[{int(bad_rows[0])}]: not a finite unit vector (norm {norm:.4g})")
    return nodes, vectors


JOURNAL_MIN = 64  # save_turn appends at least this many turns before it rewrites the file


def journal_path(path: Path) -> Path:
    """The journal of the forest file ``path``: ``PATH.journal``."""
    return path.with_name(path.name + ".journal")


def replay(data: Any, journal: Path) -> tuple[int, bool]:
    """Apply the journal's turns to the forest document ``data`` (checked afterwards, with the
    rest, by ``check_document``): the number applied, and whether the journal ends cleanly (with a
    newline) so that a next line can be appended. Turns the file already holds are skipped (a crash
    between a rewrite and the journal's removal), and a last line cut short is dropped."""
    if not journal.exists() or not isinstance(data, dict):
        return 0, True
    lines = journal.read_text(encoding="utf-8").split("\n")
    nodes, trees = data.get("nodes"), data.get("trees")
    if not isinstance(nodes, list) or not isinstance(trees, list) or not isinstance(data.get("vectors"), str):
        return 0, True
    extra, applied = [], 0
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            record = json_loads(line)
            node, tree_state, vector = record["node"], record["tree"], base64.b64decode(record["vector"], validate=True)
            node_id, tree_id, parent = node["id"], node["tree"], node["parent"]
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(lines):  # the last line, without its newline: cut short by a crash
                break
            raise ValueError(f"{journal.name}:{number}: not a journal line ({type(exc).__name__}: {exc})") from None
        if not isinstance(node_id, int) or node_id < len(nodes):
            continue
        if node_id != len(nodes) or not isinstance(tree_id, int) or not 0 <= tree_id <= len(trees):
            raise ValueError(f"{journal.name}:{number}: turn {node_id!r} of tree {tree_id!r} does not follow the file")
        if tree_id == len(trees):
            trees.append({"id": tree_id, "nodes": []})
        trees[tree_id] = {**trees[tree_id], **tree_state, "nodes": [*trees[tree_id].get("nodes", []), node_id]}
        if isinstance(parent, int) and 0 <= parent < len(nodes) and isinstance(nodes[parent].get("children"), list):
            nodes[parent]["children"].append(node_id)
        nodes.append(node)
        data["current"] = node_id
        extra.append(vector)
        applied += 1
    if extra:
        data["vectors"] = base64.b64encode(base64.b64decode(data["vectors"]) + b"".join(extra)).decode()
    return applied, lines[-1] == ""
