-- View metis.searches_per_day, version 1 (SPEC F20): searches per base, day (UTC) and mode.
-- Created by migration 0003; released view files are never edited.
-- Returns: base, day, mode, searches.
-- A search of several bases counts once for each. What was asked is never stored.
SELECT b.name     AS base,
       n.day      AS day,
       n.mode     AS mode,
       n.searches AS searches
FROM search_counts AS n
JOIN bases AS b ON b.base_id = n.base_id
