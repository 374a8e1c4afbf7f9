/* plugin_abi.c - compares a plugin's layout description with libember's (plugin_abi.h). */
#include <stdio.h>
#include <string.h>
#include "plugin_abi.h"

typedef struct report {
  char *buf;
  size_t cap, len;
  int n; /* differences so far */
} report;

/* Counts the difference even when the report is full: a short buffer never hides one. */
static void add(report *r, const char *text) {
  int first = r->n++ == 0;
  if (r->len + 1 >= r->cap) return;
  int k = snprintf(r->buf + r->len, r->cap - r->len, "%s%s", first ? "" : "; ", text);
  if (k > 0) r->len = r->len + (size_t)k < r->cap ? r->len + (size_t)k : r->cap - 1;
}

static const em_plugin_abi_item *find(const em_plugin_abi *abi, const char *what) {
  for (uint32_t i = 0; i < abi->count; i++)
    if (abi->items[i].what && strcmp(abi->items[i].what, what) == 0) return &abi->items[i];
  return NULL;
}

int core_plugin_abi_check(const char *path, const em_plugin_abi *theirs, const em_plugin_abi *ours, char *why,
                          size_t cap) {
  if (!theirs || theirs->handshake != EM_PLUGIN_HANDSHAKE) {
    snprintf(why, cap,
             "%s was built for another version of ember (its plugin handshake is version %u, this libember's %d); "
             "rebuild it with this ember",
             path, theirs ? theirs->handshake : 0, EM_PLUGIN_HANDSHAKE);
    return -1;
  }
  char item[256];
  report r = {why, cap, 0, 0};
  int k = snprintf(why, cap, "%s was built against a different ember (", path);
  r.len = k < 0 || !cap ? 0 : (size_t)k < cap ? (size_t)k : cap - 1;
  for (uint32_t i = 0; i < ours->count; i++) {
    const em_plugin_abi_item *mine = &ours->items[i], *other = find(theirs, mine->what);
    if (other && other->value == mine->value) continue;
    if (other)
      snprintf(item, sizeof item, "%s is %llu there, %llu in this libember", mine->what,
               (unsigned long long)other->value, (unsigned long long)mine->value);
    else
      snprintf(item, sizeof item, "it does not say what %s is (%llu in this libember)", mine->what,
               (unsigned long long)mine->value);
    add(&r, item);
  }
  for (uint32_t i = 0; i < theirs->count; i++) {
    const em_plugin_abi_item *other = &theirs->items[i];
    if (!other->what || find(ours, other->what)) continue;
    snprintf(item, sizeof item, "it depends on %s (%llu there), which this libember does not know", other->what,
             (unsigned long long)other->value);
    add(&r, item);
  }
  if (!r.n) return 0;
  if (r.len + 1 < cap) snprintf(why + r.len, cap - r.len, "); rebuild it together with this libember");
  return -1;
}
