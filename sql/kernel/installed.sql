-- The library metis_cosine_distance(halfvec, halfvec) is made of, NULL when the function is absent
-- or not a C function; and whether pgvector's halfvec type exists here (the function needs it).
SELECT (SELECT p.probin
        FROM pg_proc AS p
        WHERE p.proname = 'metis_cosine_distance'
          AND p.pronamespace = 'public'::regnamespace
          AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')) AS library,
       to_regtype('halfvec') IS NOT NULL AS has_halfvec
