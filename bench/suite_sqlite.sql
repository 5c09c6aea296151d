-- Breadth suite: the sqlite3 CLI run unchanged on a database it generates
-- (bench/suite_bench.py runs `sqlite3 FILE ".read bench/suite_sqlite.sql"`
-- on a fresh file).  Bulk insert of 200,000 rows in one transaction, two
-- indexes, queries that sort, group and join, then VACUUM.  Durability is
-- off so that the disk does not dominate the run.
PRAGMA synchronous = OFF;
PRAGMA journal_mode = MEMORY;
CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, category INTEGER, price REAL, note TEXT);
CREATE TABLE category (id INTEGER PRIMARY KEY, label TEXT);
BEGIN;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 200000)
INSERT INTO item (id, name, category, price, note)
  SELECT x, 'item-' || (x * 7919 % 200000), x % 500, (x * 31 % 10000) / 100.0, hex(randomblob(8 + x % 24)) FROM n;
WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < 499)
INSERT INTO category (id, label) SELECT x, 'category-' || x FROM n;
COMMIT;
CREATE INDEX item_name ON item (name);
CREATE INDEX item_category_price ON item (category, price);
SELECT count(*), sum(price) FROM item WHERE name LIKE 'item-1%';
SELECT c.label, count(*), avg(i.price) FROM item i JOIN category c ON c.id = i.category
  GROUP BY c.label ORDER BY avg(i.price) DESC LIMIT 5;
SELECT category, max(price) FROM item WHERE category BETWEEN 100 AND 200 GROUP BY category ORDER BY 2 DESC LIMIT 3;
SELECT count(DISTINCT substr(note, 1, 4)) FROM item;
SELECT name FROM item ORDER BY note LIMIT 3;
DELETE FROM item WHERE id % 3 = 0;
UPDATE item SET note = note || note WHERE id % 5 = 0;
VACUUM;
SELECT count(*) FROM item;
