-- Drop a standby's replication slot on the primary once the standby is gone (a slot holds WAL back).
-- Parameters: %(slot)s text. A slot still in use (its standby streams) is left alone.
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = %(slot)s AND NOT active
