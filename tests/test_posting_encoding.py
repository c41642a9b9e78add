"""The posting-block encoding (metis_pg.storage.postings.encode_blocks): a pure function, no database.

Chunk ids are block_no * 256 + offset (migration 0011); each (term, tier, block) row holds the
postings of one term in one block whose term frequency falls in the tier (0: tf 1, 1: 2-3,
2: 4-7, 3: 8+), with the row's highest tf and shortest chunk.
"""

from __future__ import annotations

from metis_pg.storage.postings import BLOCK_CHUNKS, MAX_TF, PostingRow, encode_blocks


def test_one_chunk_gives_one_row_per_term_without_lists():
    encoded = encode_blocks([(5, ["harbour", "pilot", "harbour"])])
    assert encoded.rows == {
        ("harbour", 1, 0): PostingRow(first_offset=5, max_tf=2, min_length=3),
        ("pilot", 0, 0): PostingRow(first_offset=5, max_tf=1, min_length=3),
    }
    assert encoded.document_frequency == {"harbour": 1, "pilot": 1}
    assert encoded.lengths == {0: [0, 0, 0, 0, 0, 3]}
    assert (encoded.chunks, encoded.terms) == (1, 3)


def test_postings_of_a_term_in_one_block_and_tier_share_a_row_with_lists():
    encoded = encode_blocks([(0, ["tide"] * 2 + ["x"] * 5), (3, ["tide"] * 3), (BLOCK_CHUNKS + 1, ["tide"] * 2)])
    row = encoded.rows[("tide", 1, 0)]
    assert row == PostingRow(first_offset=0, max_tf=3, min_length=3, offsets=[0, 3], tfs=[2, 3])
    assert encoded.rows[("tide", 1, 1)] == PostingRow(first_offset=1, max_tf=2, min_length=2)  # the next block
    assert encoded.rows[("x", 2, 0)] == PostingRow(first_offset=0, max_tf=5, min_length=7)
    assert encoded.document_frequency["tide"] == 3
    assert (encoded.max_tf["tide"], encoded.min_length["tide"]) == (3, 2)
    assert encoded.lengths == {0: [7, 0, 0, 3], 1: [0, 2]}
    assert (encoded.chunks, encoded.terms) == (3, 12)


def test_a_row_whose_postings_all_have_its_max_tf_has_no_tfs():
    # Migration 0023: a posting's tf is then max_tf (every row of tier 0 has tf 1).
    encoded = encode_blocks([(0, ["tide", "x", "x"]), (3, ["tide", "x", "x"]), (4, ["x", "x", "x"])])
    assert encoded.rows[("tide", 0, 0)] == PostingRow(first_offset=0, max_tf=1, min_length=3, offsets=[0, 3])
    assert encoded.rows[("x", 1, 0)] == PostingRow(first_offset=0, max_tf=3, min_length=3, offsets=[0, 3, 4],
                                                   tfs=[2, 2, 3])


def test_tiers_split_by_term_frequency():
    chunks = [(i, ["w"] * tf) for i, tf in enumerate([1, 2, 3, 4, 7, 8, 50])]
    rows = encode_blocks(chunks).rows
    assert {tier: rows[("w", tier, 0)].offsets or [rows[("w", tier, 0)].first_offset] for tier in range(4)} == {
        0: [0], 1: [1, 2], 2: [3, 4], 3: [5, 6]}


def test_a_term_frequency_over_a_smallint_is_stored_as_its_maximum():
    encoded = encode_blocks([(0, ["a"] * (MAX_TF + 10))])
    assert encoded.rows[("a", 3, 0)].max_tf == MAX_TF
    assert encoded.lengths == {0: [MAX_TF + 10]}  # the chunk's length is what it holds


def test_no_chunks_encode_to_nothing():
    encoded = encode_blocks([])
    assert (encoded.rows, encoded.lengths, encoded.chunks, encoded.terms) == ({}, {}, 0, 0)


def test_a_chunk_without_terms_has_a_length_and_no_row():
    encoded = encode_blocks([(2, [])])
    assert (encoded.rows, encoded.lengths) == ({}, {0: [0, 0, 0]})


def _oracle_rows(chunks):
    """Posting rows by definition: every (term, chunk) pair with its clipped tf, grouped by (term, tier, block)."""
    from collections import Counter, defaultdict

    pairs = defaultdict(list)  # (term, tier, block) -> [(offset, tf, length)]
    for chunk_id, terms in chunks:
        block, offset = divmod(chunk_id, BLOCK_CHUNKS)
        for term, tf in Counter(terms).items():
            tf = min(tf, MAX_TF)
            tier = 0 if tf == 1 else 1 if tf <= 3 else 2 if tf <= 7 else 3
            pairs[(term, tier, block)].append((offset, tf, len(terms)))
    rows = {}
    for key, postings in pairs.items():
        postings.sort()
        offsets = [o for o, _, _ in postings]
        tfs = [t for _, t, _ in postings]
        # tfs only when the postings do not all have the row's max_tf (migration 0023).
        rows[key] = PostingRow(offsets[0], max(tfs), min(n for _, _, n in postings),
                               offsets if len(offsets) > 1 else None, tfs if len(set(tfs)) > 1 else None)
    return rows


def test_random_chunks_encode_as_the_definition_says():
    import random

    rng = random.Random(24)
    words = [f"w{i}" for i in range(60)]
    for _ in range(30):
        ids = sorted(rng.sample(range(5 * BLOCK_CHUNKS), rng.randint(1, 120)))
        if rng.random() < 0.5:
            rng.shuffle(ids)  # the encoding does not rely on chunks coming in id order
        chunks = [(i, [rng.choice(words[: rng.randint(1, 60)]) for _ in range(rng.choice([0, 1, 5, 40, 200]))])
                  for i in ids]
        encoded = encode_blocks(chunks)
        assert encoded.rows == _oracle_rows(chunks)
        every = [t for _, terms in chunks for t in set(terms)]
        assert dict(encoded.document_frequency) == {t: every.count(t) for t in set(every)}
        for term in set(every):
            holding = [terms for _, terms in chunks if term in terms]
            assert encoded.max_tf[term] == max(min(terms.count(term), MAX_TF) for terms in holding)
            assert encoded.min_length[term] == min(len(terms) for terms in holding)
        assert encoded.terms == sum(len(terms) for _, terms in chunks)
        for chunk_id, terms in chunks:
            assert encoded.lengths[chunk_id // BLOCK_CHUNKS][chunk_id % BLOCK_CHUNKS] == len(terms)
