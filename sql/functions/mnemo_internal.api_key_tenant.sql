-- mnemo_internal.api_key_tenant(p_secret) -> text
-- The tenant an API key's secret acts for, or NULL when the secret is malformed,
-- unknown, revoked or expired. The one place a presented secret is checked: the
-- network surfaces call it to authenticate a request, and enter_tenant calls it for
-- the key of the transaction (the mnemo.api_key setting), so a service that routes a
-- request to the wrong tenant is refused by the database itself.
-- SECURITY DEFINER, owned by the deploying role: a key must be found before its
-- tenant is known, so the lookup cannot run under a tenant's row-level security.
-- It looks up by hash only and returns the tenant alone; guessing a secret means
-- guessing 256 random bits.
-- Writes: api_keys.last_used_at, at most once a minute per key and never waiting
-- for a lock (SKIP LOCKED: a request in flight on the same key already updates it),
-- so concurrent requests on one key do not queue behind each other's transactions.
CREATE OR REPLACE FUNCTION mnemo_internal.api_key_tenant(p_secret text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER  -- reads every tenant's keys by hash (see above)
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_key mnemo_internal.api_keys;
BEGIN
    IF p_secret IS NULL OR p_secret !~ '^mnk_[0-9a-f]{12}_[0-9a-f]{64}$' THEN
        RETURN NULL;
    END IF;
    SELECT k.* INTO v_key FROM mnemo_internal.api_keys AS k
    WHERE k.key_hash = sha256(convert_to(p_secret, 'UTF8'));
    IF NOT FOUND OR v_key.revoked_at IS NOT NULL OR v_key.expires_at <= now() THEN
        RETURN NULL;
    END IF;
    IF (v_key.last_used_at IS NULL OR v_key.last_used_at < now() - interval '1 minute')
        AND current_setting('transaction_read_only') = 'off' THEN
        UPDATE mnemo_internal.api_keys AS k SET last_used_at = now()
        WHERE k.key_id = (SELECT l.key_id FROM mnemo_internal.api_keys AS l
            WHERE l.key_id = v_key.key_id FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN v_key.tenant_id;
END;
$$;

COMMENT ON FUNCTION mnemo_internal.api_key_tenant(text) IS
'Tenant of a valid (known, unrevoked, unexpired) API key secret; NULL otherwise.';
