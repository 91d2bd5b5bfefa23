"""Long-term memory: what users told the agent, recalled in later conversations.

``store`` is the interface (a vector store can implement it later) and ``sql_store`` the full-text
version on the service's database; ``health`` is the NORMAL/DEGRADED/DOWN state with its breaker;
``recall`` builds the context a run's prompts get (salience ranking, token budget) and stores each
completed turn, never failing a run.
"""
