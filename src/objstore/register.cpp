#include "objstore/register.h"

#include "objstore/gcs.h"
#include "objstore/s3.h"
#include "store/store.h"

namespace dcpctl {

namespace {

// Each client is made on its scheme's first use (store::of), configured from the environment.
store::ObjectStore& make_s3() {
  static s3::Client client(s3::Config::from_environment());
  return client;
}

store::ObjectStore& make_gcs() {
  static gcs::Client client(gcs::Config::from_environment());
  return client;
}

}  // namespace

void register_objstore() {
  static const bool registered = [] {
    store::install_object_store("s3", make_s3);
    store::install_object_store("gs", make_gcs);
    return true;
  }();
  (void)registered;
}

}  // namespace dcpctl
