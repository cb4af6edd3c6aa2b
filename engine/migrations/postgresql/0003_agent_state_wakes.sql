-- A session's agent changed state (its turn ended, a dialog opened or was answered), whichever
-- node applied the agent's hook event: the node whose pane serves the session is woken at once,
-- as for a row written ("inbound KEY" on `relayq_rows`), not at its next look 15 s later.
CREATE FUNCTION relayq_agent_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF length(NEW.key) < 7000 THEN
        PERFORM pg_notify('relayq_rows', 'inbound ' || NEW.key);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sessions_agent_state_changed AFTER UPDATE OF agent_state ON sessions
    FOR EACH ROW WHEN (OLD.agent_state IS DISTINCT FROM NEW.agent_state)
    EXECUTE FUNCTION relayq_agent_state_changed();
