"""The tile sizes of a contraction: register tiles from the vector registers, cache tiles
from the caches (the analytical BLIS model with a packed operand), and the variant for
lanes that run over a strided index of the result (narrow images).  The machine's facts
come from ``polytc.machine``; ``Tiler.contraction`` (``strategy.py``) applies them."""
from __future__ import annotations

from dataclasses import dataclass

from ..machine import Machine


@dataclass(frozen=True)
class Sizes:
    cache: tuple  # (Ti, Tj, Tk)
    register: tuple  # (MR, NR)


#: the most rows of a product whose cores share its columns when the rows would split
#: unevenly (``choose_sizes``)
FEW_ROWS = 32
#: the most rows of a core's tile of a product whose operand is packed at every call
#: for which the cores share the columns instead, each packing its part (``choose_sizes``)
SHORT_ROWS = 64


def accumulators(m: Machine) -> int:
    """The vector registers a register tile's accumulators may take: 24 of 32 (AVX-512),
    12 of 16 (AVX2: 8 rows of 2 vectors spilled, mlp2 3.60 -> 2.36 ms as 6 x 2)."""
    return _accumulators(m.vector_registers)


def _vectors(m: Machine) -> int:
    """The vectors across the default register tile: 4 with 32 registers, else 2."""
    return 4 if m.vector_registers >= 32 else 2


def _accumulators(registers: int) -> int:
    return 24 if registers >= 32 else 12


def choose_sizes(ext_i, ext_j, ext_k, itemsize, m: Machine, packed=False,
                 cores: int | None = None, per_call: bool = False,
                 symbolic_rows: bool = False) -> Sizes:
    """Register tile from the vector registers, cache tiles from L1/L2.  ``cores``: how
    many ways the ``i`` tiles are shared (default: the machine's cores; 1 when loops
    outside the contraction, a batch, keep the cores busy already).  ``per_call``: the
    packed operand is packed at every call (not a constant packed once).

    With a packed vector operand the sizes follow the analytical BLIS model: the
    micro-panel of the operand (``Tk x NR``) fills half of L1 and stays there while the
    ``i`` register tiles pass over it, the block of the broadcast operand (``Ti x Tk``)
    stays in half of L2, and ``Ti`` is as tall as that allows while every core gets an
    equal share (each tile packs the operand once more: as few tiles as possible).
    When the ``Ti x Tj`` block of the result does not stay in L2, ``Tk`` grows instead
    until the ``Ti x Tk`` block fills half of L2 (the micro-panel then streams from L2).
    Sharing the ``j`` tiles among the cores instead (each packs its part of the operand
    once, BLIS's ``jc`` loop) was 7-13% slower on sgemm, mm_bias_relu, mlp2 and 2mm:
    the taller ``Ti`` of the unpacked broadcast operand spans more pages.  That holds
    where ``i``'s register tiles pass over a micro-panel in L1; where the panels stream
    from L2 instead (a deep ``Tk``), ``i``'s register tiles run outside them and read
    ``MR`` rows of the broadcast operand at a time however tall ``Ti`` is: there an
    operand packed at every call is packed once, by the cores sharing the ``j`` tiles,
    rather than once per tile of rows by each core.  ``symbolic_rows``: ``ext_i`` is
    the cost model's count for a symbolic size (``extents.GENERIC``), whose divisors
    say nothing of the rows a call brings."""
    lanes = m.lanes(itemsize)
    nvec = _vectors(m)
    acc = accumulators(m)
    nr = lanes * nvec
    mr = 6
    if ext_j < nr and ext_j >= lanes:
        # whole vectors, and the rows the freed registers hold: 8 x 3 vectors for a 56
        # wide convolution (230 -> 284 GFLOP/s against 6 x 56; 6 x 4 with a half
        # vector was 30% slower); under three vectors, and no packed operand (whose
        # panels are whole vectors), the partial one joins the tile (8 x 2 for a 28 wide
        # image: ResNet-18's 128-channel convolutions 1.33 -> 1.07 ms)
        whole = packed or -(-ext_j // lanes) > 2
        nvec = ext_j // lanes if whole else -(-ext_j // lanes)
        nr = lanes * nvec
        mr = min(8, acc // nvec)
    elif ext_j < nr:
        nr = max(1, ext_j)
    elif -(-ext_j // nr) * nr - ext_j > ext_j // 10:
        # over 10% of the lanes of the last j tile would be padding: up to three vectors,
        # as many as leave the fewest padded lanes, where a tile of one vector, which
        # broadcasts once per FMA, counts a quarter more (ResNet's 7x7/2 stem
        # convolution, 112 wide: 6 x 64 -> 8 x 16, 1.90 -> 0.99 ms, and 8 x 32 0.94 ->
        # 0.68; over 196 pixels at batch 64 8 x 16 -> 8 x 32 1.44 -> 0.96 ms, over 169
        # 8 x 48 31.6 -> 26.1 ms)
        nvec = min(range(1, min(nvec, 3) + 1),
                   key=lambda v: (-(-ext_j // (v * lanes)) * v * (1 + 1 / (4 * v)), -v))
        nr = lanes * nvec
        mr = min(8, acc // nvec)
    mr = max(1, min(mr, ext_i))
    if packed and ext_i == 1:
        # a matrix-vector product: a panel is read once, by one row, so it need not
        # stay in L1: the whole reduction in one tile (the accumulators are loaded once),
        # a panel per tile (the cores share them evenly, a partial one last), each
        # streamed in sequence
        return Sizes((1, nr, ext_k), (1, nr))
    ways = cores or m.cores
    if packed and ways > 1 and 1 < ext_i <= FEW_ROWS and ext_j >= 2 * nr * ways and \
            (ext_i <= mr or ext_i % ways):
        # a few rows (a small batch through constant weights): all of them in one tile,
        # register tiles of equal height, and the cores share the j tiles, each reading
        # its part of the operand, where rows shared would read all of it on every
        # core, or would split unevenly, a full tile and a partial one that isolation
        # puts in loops of their own, one after the other (an MLP's 784 -> 512 layer
        # at batch 3 31 -> 12 us, 17: 55 -> 47; at 8 rows, two tiles of 4, unchanged)
        tk = min(ext_k, max(16, (m.l1 // 2) // (itemsize * nr)))
        mr = -(-ext_i // -(-ext_i // mr))
        return Sizes((ext_i, _round_up(-(-ext_j // ways), nr), _even(ext_k, tk)), (mr, nr))
    if ext_i == 1:
        # a matrix-vector product over the matrix's rows (``y(j) += A(k, j) x(k)``),
        # not packed: each core one j tile, 8 rows of it at a time, streamed side by
        # side, the accumulators loaded and stored once per 8 rows (128 rows of 256
        # columns, 128 pages a tile: atax 0.38 -> 0.31 ms, bicg 0.43 -> 0.29 ms)
        share = -(-ext_j // (cores or m.cores))
        return Sizes((1, _round_up(share, nr), min(ext_k, 8)), (1, nr))
    if packed:
        tk = min(ext_k, max(16, (m.l1 // 2) // (itemsize * nr)))
        most = max(1, (m.l2 // 2) // (itemsize * tk * mr))  # register tiles in Ti
        jr = nr  # the j tile's unit
        step = cores or m.cores
        shares = step
        while -(-ext_i // (shares * mr)) > most:
            shares += step
        ti = _dividing(ext_i, -(-ext_i // shares), mr, step)
        if _busiest(ext_i, ti, step) > ext_i / step * 1.06:
            # no such divisor, and the partial last tile, which runs after the full
            # ones on one core, leaves the split uneven: the tallest tile within L2
            # that splits evenly (8192 x 256 x 64 in tiles of 1366 rows: five full
            # ones shared, 1362 rows alone after them, 4 tile-times for 3 -> 2046,
            # 1.74 -> 1.28 ms on a Zen 4)
            ti = _balanced(ext_i, mr, step, most)
        if ti % mr and ti <= 64:
            # a row tile of a few register tiles, partial: rows that divide it instead,
            # within the accumulator budget (a GRU's 16 batch rows, 8 a core: 6 + 2 rows
            # -> 4 + 4, 0.965 -> 0.89 ms, its cold compile 6.9 -> 4.9 s; 32 rows a core
            # of a 64 x 512 x 1000 product with constant weights, 6 x 64 -> 4 x 64:
            # 305-330 -> 142-144 us; BERT's 64-row tiles of its projections: isl's AST
            # 28.6 -> 12.6 ms a group, the model's cold compile 1.15-1.19 -> 1.01-1.05
            # s, the run times of BERT, the transformer, MLP, LSTM and GRU within 1%)
            # (more accumulators than FMAs in flight, 8: a 4 x 2 vector tile on AVX2
            # was slower than 6 x 2 and a partial one, mlp2's 2.68 against 2.36 ms);
            # 8 or 4, else any count up to 16 (the partial register tile, where the
            # columns end in a partial vector too, ran in plain loops: 100 x 100 x 512
            # in row tiles of 50, 8 x 16 -> 10 x 16, 193 -> 31 us)
            nv = -(-nr // lanes)
            mr = next((r for r in (8, 4, *range(min(16, acc // nv), 1, -1))
                       if ti % r == 0 and 8 < r * nv <= acc), mr)
        elif cores == 1 and ti % mr and ti % 8 == 0 and nr == 4 * lanes and \
                ext_j % (2 * lanes) == 0 and ext_k <= 256 and acc >= 16 and \
                not symbolic_rows:  # (whose count says nothing of a call's rows: a
            # transformer layer with a symbolic sequence length took 4 x 4 tiles, 1.27x
            # its specialised twin at 17 rows a sequence, 1.09x with 6 x 4)
            # a product per batch element (loops around keep the cores busy) whose rows
            # 6 leave partial and 8 divide, over a short reduction: 4 rows of 4 vectors
            # where they divide the columns (in the j tiles of 8 x 2), their panel as
            # deep as the whole reduction where L1 holds it (the accumulators loaded and
            # stored once), else 8 rows of 2, the same 16 accumulators (a transformer
            # at batch 64, 128 rows each: the attention's P V 1.80 -> 1.52 ms with 8 x
            # 2, the projections 2.41 -> 2.23 ms, the model 0.98x, BERT-2L 0.97x; 4 x 4
            # then, in-process A/B: bmm 64 x 128^3 0.80-0.85x, 256 P V products of 128
            # x 128 x 64 0.94-0.96x, Q K^T 0.96-0.98x, a transformer layer at batch 1
            # 0.94x, BERT-2L at batch 64 0.97x, each 0.99-1.00x at the other batch;
            # without the deeper panel the models were 0.96-1.02x; over 1024-deep
            # reductions, its FFN's second product, 6 x 4 stays, 1% faster)
            if ext_j % nr == 0:  # (the j tile as for 8 x 2)
                mr, jr = 4, 2 * lanes
                if ext_k * nr * itemsize <= m.l1:
                    tk = ext_k
            else:
                mr, nr = 8, 2 * lanes
        if ti % mr and ext_i % mr == 0 and -(-ext_i // _round_up(ti, mr)) == step:
            # a tile of rows per core that ends in a partial register tile where whole
            # ones fit (1000 rows on 2 cores: 500, 62 tiles of 8 rows and one of 4): a
            # multiple of the register tile instead, the last core's tile shorter (504
            # + 496 rows: a 1000 x 512 x 169 product with constant weights 927 -> 360
            # us).  Not where more tiles than cores would leave a partial one to run
            # after the full ones (8192 rows by 6 in tiles of 1026: 526 -> 665 us)
            ti = _round_up(ti, mr)
        tj = jr * max(1, min(8, -(-ext_j // jr)))
        if ti * min(tj, ext_j) * itemsize > m.l2 // 4:
            # the C block leaves L2, so the C tile's loads and stores at every Tk step go
            # to memory: deeper Tk steps, as deep as half of L2 holds the Ti x Tk block
            # (sgemm 1024^3: Tk 96 -> 512 took 321 to 395 GFLOP/s on a 2 MiB L2), or as
            # deep as half of L2 holds the packed Tk x Tj block, which the row tiles
            # pass over, where that is deeper (a tall Ti: SqueezeNet's 512 -> 1000
            # classifier over 169 pixels at batch 64, Tk 131 -> 512, 26.6 -> 24.7 ms)
            tk = min(ext_k, max(tk, (m.l2 // 2) // (itemsize * min(ti, tj, ext_j))))
        elif ti <= 2 * mr:
            # one or two register tiles of rows pass over each micro-panel: little to
            # keep in L1 for, while each Tk step loads and stores their accumulators
            # again: the panel as deep as a quarter of L2 holds (a recurrent layer's
            # 8 rows a core of 16 x 1024 x 256: Tk 64 -> 256)
            tk = _even(ext_k, min(ext_k, max(tk, (m.l2 // 4) // (itemsize * nr))))
        else:
            tk = _even(ext_k, tk)
        # the result's Ti x Tj block, loaded and stored at every Tk step, within twice
        # L2 (sgemm 2048^3 with 4 MB blocks ran 1.1x slower): narrower j tiles
        tj2 = min(tj, (2 * m.l2 // (itemsize * ext_i)) // nr * nr)
        if per_call:  # a j tile per core at least: an operand as narrow as one j tile
            # had kept the rows shared, each core packing all of it (M x 512 x 512 at 40,
            # 64, 256 rows: 74 -> 52, 89 -> 77, 296 -> 263 us; 64 x 256 x 512 56 -> 38)
            tj2 = min(tj2, _round_up(-(-ext_j // step), nr))
        if per_call and step > 1 and ti < ext_i and \
                (tk * nr * itemsize > m.l1 // 2 or ti <= SHORT_ROWS) and \
                tj2 >= nr and ext_j >= step * tj2 and \
                _busiest(ext_j, tj2, step) <= ext_j / step * 1.06:
            # i's register tiles outside the panels (``Tiler.contraction``): one tile of
            # all rows, the cores share the j tiles and each packs its part of the
            # operand once (BLIS's jc loop), not all of it for each tile of rows; the
            # packed Tk x Tj tile as deep as half of L2 holds, so the result block goes
            # through the cores fewer times (Zen 5, A/B in fresh processes: mlp2 0.95,
            # mm_bias_relu 0.97, sgemm 1024^3 0.97; 2048^3 in tiles 2048 x 256 x 512
            # instead of 1024 x 512 x 128, 0.96-0.98).  Also where the panels stay in
            # L1 but a core's tile of rows is short, so that packing all of the operand
            # for it weighs (mlp2's 64 rows a core: 0.92-0.97x, in-process A/B, Zen 4)
            ti, tj = ext_i, tj2
            tk = _even(ext_k, min(ext_k, max(tk, (m.l2 // 2) // (itemsize * tj))))
        return Sizes((ti, tj, tk), (mr, nr))
    if ext_i % mr and ext_i % 8 == 0 and ext_i <= 64 and nr == 4 * lanes:
        # rows of a few register tiles that 6 leave partial and 8 divide (16 or 32
        # output channels of a pointwise convolution): 8 rows of 3 vectors, the same 24
        # accumulators (SqueezeNet's squeezes at batch 1 13-26% faster, e.g. 128 -> 16
        # over 55 x 55 36 -> 27 us; at batch 64 5-9%)
        mr, nr = 8, 3 * lanes
    elif mr < ext_i <= acc // 2 and ext_i % 8 and nr == 4 * lanes:
        # a few more rows than a register tile's, over an operand read where it lies
        # (``pack.streamed``: every pass over it streams it from L2): all of them in one
        # register tile of two vectors, one pass, not 6 + 1 or 6 + 6 (M x 512 x 512 at
        # 7, 9, 10, 11, 12 rows 0.90, 0.87, 0.86, 0.96, 0.94x the time; M x 1024 x 256 at
        # 7 and 10 0.78 and 0.91x; in-process A/B)
        mr, nr = ext_i, 2 * lanes
    # the unpacked operand's Tk x Tj block in half of L2 (it was an eighth: SqueezeNet's
    # 512 -> 1000 classifier on 13 x 13, three reduction tiles of 170 -> one of 512:
    # 0.445 -> 0.391 ms; its 1x1 expand convolutions 5-13%, ShuffleNet's last 10%), a
    # divisor of the reduction when one is near
    tk = _even(ext_k, min(ext_k, max(16, (m.l2 // 2) // (itemsize * max(nr, 1) * 4))))
    tj = nr * max(1, min(4, -(-ext_j // nr)))
    share = cores or m.cores
    # the j tile of up to four register tiles that shares the j tiles best among cores
    tj2 = min((nr * k for k in range(1, 5)), key=lambda t: (_busiest(ext_j, t, share), -t))
    if -(-ext_i // mr) < 2 * share <= -(-ext_j // tj):
        # too few rows to share (16 output channels of a pointwise convolution over
        # 3025 pixels): one tile of rows, the cores share the j tiles instead, and
        # each reads its part of the vector operand once: SqueezeNet 128 -> 16 channels
        # over 55 x 55, 0.43 -> 0.21 ms; 0.048 -> 0.036 ms in 48 j tiles of 64, not 12 of 256)
        return Sizes((ext_i, tj2, tk), (mr, nr))
    ti = _balanced(ext_i, mr, share)
    if _busiest(ext_i, ti, share) > ext_i / share * 1.02:
        # still 2% off an even split: the best split of taller tiles, up to as tall as
        # half of L2 holds their Ti x Tk block (SqueezeNet's 512 -> 1000 classifier over
        # 169 pixels: 8 tiles of 120 rows and a partial one of 40 after them, 520 rows
        # on one core, 480 on the other -> 4 of 248 and one of 8, 504 and 496: 435 ->
        # 420 us in the model)
        tall = max(16, (m.l2 // 2) // (itemsize * tk * mr))
        ti = min((k * mr for k in range(1, tall + 1) if (k - 1) * mr < ext_i),
                 key=lambda t: (_busiest(ext_i, t, share), -t))
    if share == 1 and ext_i * tk * itemsize <= m.l2 // 2:
        # nothing to balance (loops around keep the cores busy): one tile of all rows,
        # as no partial one is cut (BERT's attention products, 128 rows in tiles of
        # 96: isl's AST 55 -> 26 ms per group, the same run time)
        ti = ext_i
    rows = _busiest(ext_i, ti, share) * share / ext_i  # the busiest core's share, to 1
    if ext_i <= 64 and rows > 1.06 and _busiest(ext_j, tj2, share) * share / ext_j < rows:
        # rows that do not split evenly among the cores (32 output channels of a
        # pointwise convolution: tiles of 12, 12 and 8): one tile of them, the cores
        # share the j tiles instead, in the size that balances them best (SqueezeNet's
        # 256 -> 32 over 27 x 27: 0.053 -> 0.031 ms, 12 j tiles of 64)
        return Sizes((ext_i, tj2, tk), (mr, nr))
    return Sizes((ti, tj, tk), (mr, nr))


def generic_rows(mr: int, nr: int, tk: int, ext_j: int, ext_k: int, itemsize: int,
                 m: Machine, per_call: bool = False, packed_once: bool = False) -> tuple:
    """``(Ti, Tj, Tk)`` of a contraction whose rows are symbolic (a dynamic batch): the
    ``j`` tiles shared by the cores (up to 8 panels each), so that a single row keeps
    every core busy (rows shared would leave all but one idle below ``Ti`` rows), and up
    to 16 register tiles of rows whose ``Ti x Tk`` block stays in half of L2, whatever
    the number of rows.  An operand packed at every call (``per_call``), which each
    tile of rows packs again, is packed as deep as half of L2 holds a core's ``Tk x Tj``
    part of it: fewer reduction tiles, each loading and storing the accumulators (a
    generic M x 512 x 512 product, Tk 128 -> 512: over the kernel made for M rows 1.13 ->
    0.86 at 64 rows, 1.14 -> 0.96 at 256, 1.09 -> 1.06 at 1000); one packed before the
    first call (``packed_once``) in panels as deep as a quarter of L2 holds."""
    # (8 panels of the widest register tile: as many columns for a narrower one, a few
    # rows' variant, ``codegen_c/fewrows.py``, whose 784 columns in tiles of 256 had
    # split 512 + 272)
    widest = m.lanes(itemsize) * _vectors(m)
    tj = max(nr, min(8 * max(nr, widest), _round_up(-(-ext_j // m.cores), nr)))
    if per_call:
        tk = _even(ext_k, min(ext_k, max(tk, (m.l2 // 2) // (itemsize * tj))))
    elif packed_once:
        # an operand packed before the first call (weights): panels as deep as a quarter
        # of L2 holds, as for one or two register tiles of known rows (``choose_sizes``):
        # a call of a few rows (a small batch, a short sequence) would load and store its
        # accumulators at every shallow step, and many rows read the panels from L2 as
        # fast (a generic MLP's 784 -> 512 layer, Tk 56 -> 784, over the kernels made
        # for 4, 8, 16, 64, 256 and 1000 rows: 1.11, 1.24, 1.22, 1.08, 1.02, 1.02 ->
        # 1.00, 1.09, 1.02, 0.92, 0.91, 1.00; in-process, interleaved)
        tk = _even(ext_k, min(ext_k, max(tk, (m.l2 // 4) // (itemsize * nr))))
    ti = mr * max(1, min(16, (m.l2 // 2) // (itemsize * tk * mr)))
    return ti, tj, tk


#: a core's packing of an element of the operand, in rows of products with it
#: (``all_rows``): a generic M x 784 x 256 product ran as fast with its rows shared as
#: with its j tiles (448 and 336 columns) shared at about 100 rows
PACK_ROWS = 16


def all_rows(mr: int, ext_j: int, tj: int, cores: int, per_call: bool) -> tuple:
    """``(Ti, rows)`` of a contraction whose rows are symbolic and whose operand is
    packed: one cache tile of all rows (a multiple of ``mr`` beyond any batch), so that
    a core packs the operand (``per_call``: at every call) once, not once more for every
    tile of rows (a generic M x 784 x 256 product in tiles of 96 rows ran 1.18x and
    1.20x the time of the kernels made for 512 and 1000 rows: each core packed all 784
    columns for each), and its full tiles of rows are not left to one core (with the
    operand packed before the first call, isl isolated the two j tiles, 448 and 336
    columns, each a loop of one iteration: 1.9x at 300 rows).  (Not for an operand
    packed at every call in one ``j`` tile, ``Tiler.contraction``: in the loop of tiles
    of rows each core packs for its own tiles only, and the 10-statement row program of
    ``bench_compile.py --dynamic`` ran 3-4% slower from 1000 rows with one tile.)

    ``rows``: where the ``j`` tiles do not split evenly among the cores (784 columns in
    tiles of 448 and 336), the rows from which the cores share each ``j`` tile's rows,
    each packing every ``j`` tile (``rowsplit.tiles_split``), rather than the ``j``
    tiles: from there the busiest core's extra columns cost more than its packing of the
    others' and its share of the rows rounded up to register tiles.  None where they
    split evenly (or there is one ``j`` tile: its rows are shared where there are
    enough)."""
    widths = [min(tj, ext_j - t) for t in range(0, ext_j, tj)]
    q, r = divmod(len(widths), cores)  # (OpenMP's static schedule: contiguous chunks)
    at, busiest = 0, 0
    for c in range(cores):
        busiest = max(busiest, sum(widths[at:at + q + (c < r)]))
        at += q + (c < r)
    if len(widths) < 2 or busiest * cores <= ext_j * 1.02:
        return mr << 24, None
    pack = PACK_ROWS if per_call else 0  # (rows: ``k`` register tiles, from which on
    # every count pays: an odd count of them leaves one core a register tile more)
    pays = [ext_j * (pack + -(-k // cores) * mr) < busiest * (pack + k * mr)
            for k in range(1, 1 << 12)]
    if not pays[-1]:
        return mr << 24, None
    return mr << 24, (max((k for k, ok in enumerate(pays, 1) if not ok), default=0) + 1) * mr


def loose_tiles(ext: list, cache: list, sym: list, first: int, n: int, m: Machine) -> tuple:
    """The member of a cache band whose partial last tile the AST keeps in the loop of
    its tiles (``transform.isolate_full_tiles``'s ``loose``): the parallel loop, the
    first from ``first`` with several tiles (before ``n``, the reductions), where it has
    a tile per core of ``m`` at most, the last one partial.  Isolated, the full tiles
    and the partial one are each a loop of one iteration, and nothing is left to run in
    parallel (a 1000 x 512 x 160 product with constant weights, rows in tiles of 504
    and 496, ran on one core: 648 -> 331 us).  Only that loop: a loop of tiles inside it
    that keeps its partial one has no constant trip counts in it (ShuffleNet 1.16-1.20x
    with every such loop kept whole)."""
    for d in range(first, min(n, len(ext))):
        if sym[d] or ext[d] <= 0:
            return ()
        if ext[d] > cache[d]:  # (several tiles)
            partial = ext[d] % cache[d] and -(-ext[d] // cache[d]) <= m.cores
            return (d,) if partial else ()
    return ()


def _strided_sizes(sz: Sizes, ext_i: int, ext_j: int, ext_k: int, lanes: int,
                   cores: int, rest: int = 1, itemsize: int = 4, l2: int = 0,
                   registers: int = 32) -> Sizes:
    """Sizes for a register tile whose lanes run over a strided index of the result (see
    ``Tiler.contraction``): ``i`` is short (an image row of 7, 14 or 28), so it is one
    cache tile, the cores share the ``j`` tiles instead (each packs its own part of the
    operand), and ``MR`` and ``NR`` are chosen together, within the machine's budget of
    accumulators (``accumulators``; see the key below; the default register tile's
    own count had stood for it, and its rows fitted to 55 rows, 5 x 4 vectors, had cut
    the budget to 20: SqueezeNet's 55 x 55 3x3 convolutions ran as 11 x 1 vectors
    instead of 8 x 2, 131.6 -> 122.7 us, its 27 x 27 ones as 9 x 1 instead of 9 x 2,
    122.4 -> 114.6 us; the model 0.976-0.990x at batch 1, 0.968-0.993x at 64, in-process
    A/B, no other model's code changed).  ``Tk`` of a matrix product
    (``rest``, the other reduction loops' iterations, is 1) is as deep as a quarter
    of L2 (``l2``) holds the packed panel (``Tk x NR``): each reduction tile loads and
    stores the accumulators element by element, with the result's stride
    (SqueezeNet's 512 -> 1000 classifier on 13 x 13: Tk 128 -> 512, 0.69 -> 0.61 ms);
    it divides the reduction evenly when a divisor lies within a factor 2 (no partial
    reduction tile: half the code, gcc 1.1 -> 0.6 s for a 512-channel 3x3
    convolution)."""
    mr0, nr0 = sz.register
    most = max(1, nr0 // lanes)
    budget = _accumulators(registers)
    share = -(-ext_j // cores)
    # the most accumulators any candidate has: below half the budget a register tile
    # is latency-bound (512 -> 1000 channels of 13 x 13 with 1 x 48 ran at 90 GFLOP/s)
    def rows(nvec):  # one vector: up to 14 rows (13 rows of 13 x 13 in one tile); two:
        # up to 12 where no count from 5 to 8 divides the rows (9 rows of 27 x 27 by 2
        # vectors: 0.146 -> 0.110 ms against 3 x 4; 55 x 55 as 11 x 2 was 14% slower
        # than 5 x 4 at batch 64)
        wide = nvec == 2 and all(ext_i % r for r in range(5, 9))
        # (16 registers: what they hold besides the operand's vectors and a broadcast,
        # 14 rows of one vector, 6 of two: 8 x 2 spilled on AVX2)
        fit = budget // nvec if registers >= 32 else (registers - nvec - 1) // nvec
        return min(14 if nvec == 1 else 12 if wide else 8, ext_i, fit)

    most_acc = max(rows(v) * v for v in range(1, most + 1))
    best = None
    for nvec in range(most, 0, -1):
        nr = nvec * lanes
        # a full j tile per core (isl isolates a partial last tile in a loop of its own:
        # the parallel loop runs over the full ones), no partial row tile (7 x 48 over
        # 13 rows ran 4x slower than 1 x 48), half the budget of accumulators (before the
        # partial row tile where it is one of four or more, run by the micro-kernel's
        # guarded rows: SqueezeNet's 55 x 55 3x3 convolutions as 8 x 2 vectors, 7 tiles
        # and a partial one, not 11 x 1: 133 -> 123 us, at batch 64 12.0 -> 11.1 ms, the
        # model 0.991 and 0.978 A/B), tiles of equal sizes, then the least padded work, then rows
        # enough that each vector of the operand's panel, which streams from L2, serves
        # 7 FMAs (ResNet-18's 3x3/2 convolution of 64 -> 128 channels onto 28 x 28: 4 x 4
        # vectors 0.33 -> 7 x 2 0.25 ms), then the most accumulators (7 x 2 vectors
        # for 7 rows and 512 channels on 2 cores)
        for tj in sorted({_round_up(share, nr), nr}, reverse=True):
            for mr in range(rows(nvec), 0, -1):
                work = -(-ext_i // mr) * mr * -(-ext_j // tj) * tj
                if registers >= 32:
                    partial, short = ext_i % mr != 0, mr * nvec < min(budget // 2, most_acc)
                    first = (short, partial) if ext_i >= 4 * mr else (partial, short)
                    key = (ext_j // tj < cores, *first, ext_j % tj != 0, work,
                           -min(mr, 7), -mr * nvec)
                else:  # 16 registers: 6 accumulators are enough, and two vectors (a
                    # broadcast per two FMAs) beat one however many rows (AVX2 on a Zen
                    # 5: 55 x 55 as 5 x 2 vectors 393 -> 243 us, 27 x 27 as 3 x 2 474 ->
                    # 332; 13 x 13 stays 13 x 1: 6 x 2 leaves a partial tile)
                    key = (ext_j // tj < cores, ext_i % mr != 0, mr * nvec < 6,
                           ext_j % tj != 0, work, -nvec, -mr * nvec)
                if best is None or key < best[0]:
                    best = (key, mr, nr, tj)
    _, mr, nr, tj = best
    tk = sz.cache[2]
    if l2:  # the panel counts the other reduction loops (a 3x3 window's 9): Tk over
        # the channels of a 3x3 convolution as deep as a quarter of L2 holds Tk x 9 x NR
        # (a Zen 4, 32 KiB L1, whose L1 rule gave Tk 64: every reduction tile loads and
        # stores the accumulators with the result's stride, transposed; 128, 256 and
        # 512 channels in 1, 1 and 2 tiles instead of 2, 4 and 8: 2-5% faster at batch
        # 1 and 16, in-process A/B.  All of them in one tile, 512 channels too, had made
        # ResNet-18 1.5% slower on a Zen 5, whose L1 rule gave 128)
        tk = min(ext_k, max(tk, l2 // 4 // (rest * nr * itemsize)))
    even = [d for d in range(max(1, tk // 2), 2 * tk + 1) if ext_k % d == 0]
    if ext_k % tk and even:
        tk = min(even, key=lambda d: (abs(d - tk), -d))
    return Sizes((ext_i, tj, tk), (mr, nr))


def _even(ext: int, tk: int) -> int:
    """``tk``, or the divisor of ``ext`` nearest to it within a factor 2 (the larger of
    two as near): no partial reduction tile, whose micro-kernel is code of its own
    (BERT-2L's 256-deep GEMMs in tiles of 96 had four micro-kernels, two with 128: gcc
    1.78 -> 1.49 s for the model; the LSTM 10%, GRU 3%, BERT 2% faster, A/B)."""
    if ext % tk == 0:
        return tk
    even = [d for d in range(max(1, tk // 2), 2 * tk + 1) if ext % d == 0]
    return min(even, key=lambda d: (abs(d - tk), -d)) if even else tk


def _balanced(ext: int, step: int, cores: int, most: int = 16) -> int:
    """The largest tile height (a multiple of ``step``, at most ``most`` steps) whose
    tiles keep every core busy to within 6% of a perfect split, else the best balanced
    one.  The parallel loop runs over tiles, and isolation puts the full tiles and the
    partial last one in separate loops: the full ones are shared by the cores, the
    partial one runs after them (128 rows in tiles of 66 would leave one core idle)."""
    sizes = [k * step for k in range(1, most + 1) if k == 1 or (k - 1) * step < ext]
    good = [t for t in sizes if _busiest(ext, t, cores) <= ext / cores * 1.06]
    return max(good) if good else min(sizes, key=lambda t: (_busiest(ext, t, cores), -t))


def _busiest(ext: int, t: int, cores: int) -> int:
    """The iterations of the busiest core when ``ext`` runs in tiles of ``t``, the full
    ones shared by the cores, the partial one after them."""
    full, rest = divmod(ext, t)
    return -(-full // cores) * t + rest


def _dividing(ext: int, ti: int, mr: int, cores: int) -> int:
    """``ti``, or the largest multiple of ``mr`` down to ``ti / 2`` that divides ``ext``
    into a number of tiles the cores share evenly: a last, partial tile of rows runs
    outside the micro-kernel wherever its columns end in a partial tile too
    (SqueezeNet's 512 -> 1000 classifier at batch 8: 1000 rows in tiles of 334 took 80
    ms, the last third of them in plain loops; in tiles of 200, 4 ms)."""
    if ext % ti == 0:
        return ti
    for t in range(ti - ti % mr, max(mr, ti // 2) - 1, -mr):
        if t > 0 and ext % t == 0 and (ext // t) % cores == 0:
            return t
    return ti


def _round_up(x, m):
    return -(-x // m) * m if m > 0 else x
