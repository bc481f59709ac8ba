-- Revision 0006_edges, downgrade.
DROP TABLE IF EXISTS runner.slot_fanouts;
