-- Version 2 to 3 (upgrade_v3.sql goes on to 4): the dropout and repeat axes and the kernel launches of a forward. Cells
-- measured before had no dropout and were the first repeat; their launch count was not recorded.
ALTER TABLE cells ADD COLUMN dropout REAL NOT NULL DEFAULT 0;
ALTER TABLE cells ADD COLUMN repeat INTEGER NOT NULL DEFAULT 1;
ALTER TABLE cells ADD COLUMN launches_per_forward INTEGER;
UPDATE schema_info SET version = 3;
PRAGMA user_version = 3;
