-- The login event trigger's function (migration 0014): limits for the members of metis_analyst.
-- A group role's CONNECTION LIMIT and settings do not apply to its members' logins, so each login
-- of a member (not a superuser, not the owner of this function) to this database:
--   - gets statement_timeout from analyst_limits (a member may still SET it higher: docs/sql-views.md);
--   - is refused (SQLSTATE 53300 too_many_connections) when the members already hold
--     analyst_limits.max_connections connections to the cluster: the rest are kept for the service.
-- Any error other than the refusal lets the login through: a broken limit never locks anyone out.
CREATE OR REPLACE FUNCTION metis_analyst_login() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $function$
DECLARE
    lim record;
    held integer;
BEGIN
    BEGIN
        IF session_user::text = current_user::text
           OR NOT pg_catalog.pg_has_role(session_user, 'metis_analyst', 'MEMBER')
           OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN
            RETURN;
        END IF;
        SELECT l.max_connections, l.statement_timeout_ms INTO lim FROM analyst_limits l;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        PERFORM pg_catalog.set_config('statement_timeout', lim.statement_timeout_ms || 'ms', false);
        SELECT count(*) INTO held
        FROM pg_catalog.pg_stat_activity a
        JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
        WHERE a.pid <> pg_catalog.pg_backend_pid()
          AND a.backend_type = 'client backend'
          AND NOT r.rolsuper
          AND pg_catalog.pg_has_role(a.usesysid, 'metis_analyst', 'MEMBER');
    EXCEPTION WHEN OTHERS THEN
        RETURN;
    END;
    IF held >= lim.max_connections THEN
        RAISE EXCEPTION 'too many analyst connections: members of metis_analyst hold % of at most %', held,
            lim.max_connections
            USING ERRCODE = 'too_many_connections',
                  HINT = 'close one, or ask the operator to raise METIS_ANALYST_MAX_CONNECTIONS '
                         '(the other connections are kept for the metis service)';
    END IF;
END
$function$
