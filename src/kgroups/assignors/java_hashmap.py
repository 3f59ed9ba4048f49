"""java.util.HashMap's iteration order over String keys, crowded buckets included.

`java_hash.iteration_order` covers the usual case: buckets in index order, a bucket's keys in
put order. Java departs from it when a bucket gets crowded: a bucket taking its ninth key
doubles a table of fewer than 64 slots, and in a larger table turns into a red-black tree whose
root is moved to the front of the bucket and whose later keys are linked in right after their
tree parent. Member and process ids are chosen by clients, so ids built to share a hash code
reach those paths; this module replays the puts the way Java does them (the tree built by hash
code, then String order, rotations and the root's move included; a resize splitting a tree in
two rebuilds each half of more than six keys, or flattens it) and lists the keys as Java would
iterate them. Only puts of distinct keys are modelled: the maps it serves never remove.
"""

from __future__ import annotations

from collections.abc import Iterable

from kgroups.assignors.java_hash import string_hash, table_size_for

_TREEIFY_THRESHOLD = 8
_UNTREEIFY_THRESHOLD = 6
_MIN_TREEIFY_CAPACITY = 64


class _Node:
    __slots__ = ("hash", "key", "left", "next", "parent", "prev", "red", "right", "sort", "tree")

    def __init__(self, hash_: int, key: str) -> None:
        self.hash = hash_  # the spread hash as Java's signed int
        self.key = key
        self.sort = key.encode("utf-16-be")  # String.compareTo: UTF-16 code units
        self.next: _Node | None = None
        self.tree = False
        self.prev: _Node | None = None
        self.parent: _Node | None = None
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.red = False


def _direction(node: _Node, other: _Node) -> int:
    """Where `node` goes below `other`: by hash code, then by String order (distinct keys)."""
    if other.hash != node.hash:
        return -1 if other.hash > node.hash else 1
    return -1 if node.sort < other.sort else 1


_OTHER = {"left": "right", "right": "left"}


def _rotate(root: _Node, p: _Node, side: str) -> _Node:
    """Rotate towards `side` ("left": p's right child takes p's place); the tree's root."""
    other = _OTHER[side]
    up = getattr(p, other)
    if up is None:
        return root
    inner = getattr(up, side)
    setattr(p, other, inner)
    if inner is not None:
        inner.parent = p
    pp = up.parent = p.parent
    if pp is None:
        root = up
        up.red = False
    elif getattr(pp, side) is p:
        setattr(pp, side, up)
    else:
        setattr(pp, other, up)
    setattr(up, side, p)
    p.parent = up
    return root


def _balance_insertion(root: _Node, x: _Node) -> _Node:
    """Red-black insertion fix-up as HashMap's tree bins do it; the tree's root."""
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        xpp = xp.parent
        if not xp.red or xpp is None:
            return root
        near = "left" if xp is xpp.left else "right"
        far = _OTHER[near]
        uncle = getattr(xpp, far)
        if uncle is not None and uncle.red:
            uncle.red = xp.red = False
            xpp.red = True
            x = xpp
            continue
        if x is getattr(xp, far):
            x = xp
            root = _rotate(root, x, near)
            xp = x.parent
            xpp = None if xp is None else xp.parent
        if xp is not None:
            xp.red = False
            if xpp is not None:
                xpp.red = True
                root = _rotate(root, xpp, far)


class JavaStringHashMap:
    """The key order of a java.util.HashMap<String, ?> after puts of distinct keys."""

    def __init__(self, initial_capacity: int = 16) -> None:
        self._capacity = table_size_for(max(initial_capacity, 1))
        self._table: list[_Node | None] = []
        self._size = 0

    def put_all(self, keys: Iterable[str]) -> JavaStringHashMap:
        for key in keys:
            self.put(key)
        return self

    def put(self, key: str) -> None:
        if not self._table:
            self._table = [None] * self._capacity
        h = string_hash(key)
        spread = h ^ (h >> 16)
        node = _Node(spread - (1 << 32) if spread & 0x80000000 else spread, key)
        index = node.hash & (len(self._table) - 1)
        first = self._table[index]
        if first is None:
            self._table[index] = node
        elif first.tree:
            self._put_tree(first, node)
        else:
            count = 0
            last = first
            while last.next is not None:
                last = last.next
                count += 1
            last.next = node
            if count >= _TREEIFY_THRESHOLD - 1:
                self._treeify_bin(index)
        self._size += 1
        if self._size > len(self._table) * 3 // 4:
            self._resize()

    def order(self) -> list[str]:
        """The keys as the map iterates them."""
        out = []
        for node in self._table:
            while node is not None:
                out.append(node.key)
                node = node.next
        return out

    def _treeify_bin(self, index: int) -> None:
        if len(self._table) < _MIN_TREEIFY_CAPACITY:
            self._resize()
            return
        head = self._table[index]
        prev = None
        node = head
        while node is not None:
            node.tree = True
            node.prev = prev
            prev = node
            node = node.next
        assert head is not None
        self._treeify(head)

    def _treeify(self, head: _Node) -> None:
        root: _Node | None = None
        x: _Node | None = head
        while x is not None:
            x.left = x.right = None
            if root is None:
                x.parent = None
                x.red = False
                root = x
            else:
                p = root
                while True:
                    direction = _direction(x, p)
                    below = p.left if direction <= 0 else p.right
                    if below is None:
                        x.parent = p
                        if direction <= 0:
                            p.left = x
                        else:
                            p.right = x
                        root = _balance_insertion(root, x)
                        break
                    p = below
            x = x.next
        assert root is not None
        self._move_root_to_front(root)

    def _put_tree(self, first: _Node, x: _Node) -> None:
        root = first  # a tree bucket starts with its root
        p = root
        while True:
            direction = _direction(x, p)
            below = p.left if direction <= 0 else p.right
            if below is None:
                xp, xpn = p, p.next
                x.tree = True
                x.next = xpn
                if direction <= 0:
                    xp.left = x
                else:
                    xp.right = x
                xp.next = x
                x.parent = x.prev = xp
                if xpn is not None:
                    xpn.prev = x
                self._move_root_to_front(_balance_insertion(root, x))
                return
            p = below

    def _move_root_to_front(self, root: _Node) -> None:
        index = root.hash & (len(self._table) - 1)
        first = self._table[index]
        if root is first:
            return
        rn, rp = root.next, root.prev
        if rn is not None:
            rn.prev = rp
        if rp is not None:
            rp.next = rn
        if first is not None:
            first.prev = root
        root.next = first
        root.prev = None
        self._table[index] = root

    def _resize(self) -> None:
        old = self._table
        bit = len(old)
        self._table = [None] * (bit * 2)
        for index, head in enumerate(old):
            if head is None:
                continue
            halves: tuple[list[_Node], list[_Node]] = ([], [])
            node: _Node | None = head
            while node is not None:
                halves[1 if node.hash & bit else 0].append(node)
                node = node.next
            for half, at in zip(halves, (index, index + bit), strict=True):
                if half:
                    self._relink(half, at, head.tree, bool(halves[0] and halves[1]))

    def _relink(self, nodes: list[_Node], index: int, tree: bool, split: bool) -> None:
        """One half of a split bucket, in its old order: a tree half of six keys or fewer
        flattened, a larger one rebuilt if the other half took keys (kept as is otherwise)."""
        for before, after in zip(nodes, [*nodes[1:], None], strict=True):
            before.next = after
            if after is not None:
                after.prev = before
        nodes[0].prev = None
        self._table[index] = nodes[0]
        if not tree:
            return
        if len(nodes) <= _UNTREEIFY_THRESHOLD:
            for node in nodes:
                node.tree = False
                node.prev = node.parent = node.left = node.right = None
        elif split:
            self._treeify(nodes[0])
