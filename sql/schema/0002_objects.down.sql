-- 0002_objects, down
DROP TABLE runner.sql_objects;
