-- metis_cosine_distance(a, b): a's cosine distance to b, as pgvector's a <=> b, from metis_pg's own
-- kernel (metis_pg/db/cosine_kernel.c, built by metis_pg.db.kernel). {library} is the library's
-- path, a literal composed by the caller. Created (and re-pointed) by metis_pg itself on the
-- embedded server only, never by a migration: a server without the library keeps pgvector's <=>.
CREATE OR REPLACE FUNCTION public.metis_cosine_distance(halfvec, halfvec) RETURNS float8
    AS {library}, 'metis_halfvec_cosine_distance'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
