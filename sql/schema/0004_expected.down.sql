-- 0004_expected, down
DROP TABLE runner.misfire_ranges;
