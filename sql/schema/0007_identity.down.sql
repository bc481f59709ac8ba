-- 0007_identity, down
DROP TABLE IF EXISTS runner.ledger_identity;
