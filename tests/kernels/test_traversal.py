"""BFS and DFS orders of rooted trees: hand-computed cases and their defining properties."""

import numpy as np

from chunktree.kernels.traversal import bfs_order, children_csr, dfs_order


def random_tree(n, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    parent = np.full(n, -1, np.int64)
    for k in range(1, n):  # each vertex hangs below an earlier one in perm
        parent[perm[k]] = perm[rng.integers(0, k)]
    return parent, int(perm[0]), rng.random(n).astype(np.float32)


def depths(parent, root):
    d = np.zeros(len(parent), int)
    for v in range(len(parent)):
        u = v
        while u != root:
            u = parent[u]
            d[v] += 1
    return d


def test_hand_computed():
    #        0
    #   .5 /   \ .9
    #     1     2
    # .1 / \.7   \ .3
    #   3   4     5
    parent = np.array([-1, 0, 0, 1, 1, 2])
    weight = np.array([0, .5, .9, .1, .7, .3], np.float32)
    indptr, children = children_csr(parent, -weight)
    assert bfs_order(indptr, children, 0).tolist() == [0, 2, 1, 5, 4, 3]
    assert dfs_order(indptr, children, 0).tolist() == [0, 2, 5, 1, 4, 3]


def test_ties_fall_to_next_key_then_index():
    parent = np.array([-1, 0, 0, 0, 0])
    weight = np.array([0, .5, .5, .5, .9], np.float32)
    qsim = np.array([0, .1, .2, .1, 0], np.float32)
    indptr, children = children_csr(parent, -weight, -qsim)
    assert bfs_order(indptr, children, 0).tolist() == [0, 4, 2, 1, 3]


def test_bfs_properties():
    for seed in range(5):
        parent, root, weight = random_tree(300, seed)
        indptr, children = children_csr(parent, -weight)
        order = bfs_order(indptr, children, root)
        assert sorted(order.tolist()) == list(range(300))
        pos = np.empty(300, int)
        pos[order] = np.arange(300)
        assert all(pos[v] > pos[parent[v]] for v in range(300) if v != root)
        assert (np.diff(depths(parent, root)[order]) >= 0).all()
        for v in range(300):  # siblings by descending weight
            kids = order[np.isin(order, np.flatnonzero(parent == v))]
            assert (np.diff(weight[kids]) <= 0).all()


def test_dfs_properties():
    for seed in range(5):
        parent, root, weight = random_tree(300, seed)
        indptr, children = children_csr(parent, -weight)
        order = dfs_order(indptr, children, root)
        assert sorted(order.tolist()) == list(range(300))
        pos = np.empty(300, int)
        pos[order] = np.arange(300)
        size = np.ones(300, int)
        for v in order[::-1]:
            if v != root:
                size[parent[v]] += size[v]
        for v in range(300):  # preorder: each subtree is the contiguous block starting at its root
            block = order[pos[v]:pos[v] + size[v]]
            assert all(u == v or (pos[parent[u]] >= pos[v] and pos[parent[u]] < pos[v] + size[v]) for u in block)
        for v in range(300):  # the first child of v comes right after v
            kids = np.flatnonzero(parent == v)
            if len(kids):
                assert order[pos[v] + 1] == kids[np.argmax(weight[kids])]


def test_single_vertex():
    indptr, children = children_csr(np.array([-1]))
    assert bfs_order(indptr, children, 0).tolist() == [0] == dfs_order(indptr, children, 0).tolist()


def test_best_first_against_a_frontier_scan():
    from chunktree.kernels.traversal import best_first_order

    for seed in range(5):
        parent, root, _w = random_tree(200, seed)
        priority = np.round(np.random.default_rng(seed).random(200), 2)  # rounded: many ties
        indptr, children = children_csr(parent)
        got = best_first_order(indptr, children, root, priority)
        want, frontier = [root], set(np.flatnonzero(parent == root).tolist())
        while frontier:
            v = max(frontier, key=lambda c: (priority[c], -c))  # ties to the lower index
            frontier.remove(v)
            want.append(v)
            frontier |= set(np.flatnonzero(parent == v).tolist())
        assert got.tolist() == want


def test_pull_neighbours_against_a_plain_loop():
    from chunktree.kernels.traversal import pull_neighbours_order

    parent, _root, w = random_tree(150, 7)
    w = np.round(w, 1)  # many equal weights: ties go to the lower index
    indptr, children = children_csr(parent, -w)
    ranking = np.random.default_rng(7).permutation(150).astype(np.int64)
    got = pull_neighbours_order(indptr, children, parent, w, ranking)
    placed, want = set(), []
    for v in ranking.tolist():
        if v in placed:
            continue
        near = np.flatnonzero(parent == v).tolist() + ([int(parent[v])] if parent[v] >= 0 else [])
        edge = {c: w[c] if parent[c] == v else w[v] for c in near}
        for u in [v] + sorted((c for c in near if c not in placed), key=lambda c: (-edge[c], c)):
            placed.add(u)
            want.append(u)
    assert got.tolist() == want
