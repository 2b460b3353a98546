/* A hook client built against the installed package (kir::kir_hook): the smallest one. */
#include <kir/hooks.h>

const kir_hook_client* kir_hook_client_entry(void) {
  static kir_hook_client client = {sizeof(kir_hook_client), KIR_HOOK_API_VERSION};
  return &client;
}
