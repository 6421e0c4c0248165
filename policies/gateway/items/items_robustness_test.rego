package gateway.items_robustness_test

# One malformed envelope is denied on its own; it never breaks the rest of the batch.

import data.gateway.items
import data.gateway.items_test as it

test_null_scope_item_denied_not_error if {
	inp := it.batch([it.base_item, object.union(it.base_item, {"id": "bad", "scope": null})])
	items.allowed == ["i1"] with input as inp
	items.denied == [{"id": "bad", "reason": "scope"}] with input as inp
}

test_null_acl_item_denied_not_error if {
	inp := it.batch([it.base_item, object.union(it.base_item, {"id": "bad", "acl": null})])
	items.allowed == ["i1"] with input as inp
	items.denied == [{"id": "bad", "reason": "acl"}] with input as inp
}

test_object_scope_is_not_every_scope if {
	inp := it.batch([object.union(it.base_item, {"scope": {}})])
	items.allowed == [] with input as inp
}

test_entity_kind_is_governed_but_not_by_task_kinds if {
	inp := it.batch([object.union(it.base_item, {"id": "e1", "kind": "entity"})])
	items.allowed == ["e1"] with input as inp
}
