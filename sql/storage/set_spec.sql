-- Write a base's spec (storage/mark_tokenized.sql computes it). Parameters: %(base_id)s int,
-- %(spec)s jsonb.
UPDATE bases SET spec = %(spec)s::jsonb WHERE base_id = %(base_id)s
