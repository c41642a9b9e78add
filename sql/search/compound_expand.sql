-- Compound words (issue 14): the question's words that no chunk of the bases holds, each with
-- the longer words of the bases' vocabulary that contain it (German, Dutch, Scandinavian
-- compounds: "passwort" -> "passwortrichtlinie"). The caller adds them to the keyword leg's
-- terms with a weight below 1 (term_weights of hybrid.sql). A word some chunk holds is never
-- expanded, so exact matches (identifiers, every word the bases hold) search as before.
--
-- Parameters:
--   %(base_ids)s      int[]   bases searched
--   %(candidates)s    text[]  the question's terms that may be expanded (the caller keeps words of
--                             at least COMPOUND_MIN_CHARS letters)
--   %(per_term)s      int     longer words kept per question word, most frequent first
--   %(min_rest)s      int     characters a longer word has beyond the question's word, at least: the
--                             rest of a compound is a word (Passwort|richtlinie), while inflections
--                             and clitics add 1-3 (configuration|s, network|ing, Arabic al-ijtima'|iya)
--
-- Returns: term (the question's word), expansion (a longer vocabulary word containing it), df
-- (its document frequency summed over the bases), ordered by term, df descending, expansion.
-- Cost: one scan of the bases' vocabulary (bm25_terms) per absent word, none when every word
-- is present.
WITH absent AS MATERIALIZED (
    SELECT c.term
    FROM unnest(%(candidates)s::text[]) AS c(term)
    WHERE NOT EXISTS (
        SELECT 1 FROM bm25_terms AS bt
        WHERE bt.base_id = ANY(%(base_ids)s::int[]) AND bt.term = c.term AND bt.df > 0
    )
)
SELECT a.term, x.expansion, x.df
FROM absent AS a
CROSS JOIN LATERAL (
    SELECT bt.term AS expansion, sum(bt.df)::bigint AS df
    FROM bm25_terms AS bt
    WHERE bt.base_id = ANY(%(base_ids)s::int[])
      AND bt.df > 0
      AND char_length(bt.term) >= char_length(a.term) + %(min_rest)s
      AND strpos(bt.term, a.term) > 0
    GROUP BY bt.term
    ORDER BY sum(bt.df) DESC, bt.term
    LIMIT %(per_term)s
) AS x
ORDER BY a.term, x.df DESC, x.expansion
