// The object-store module (src/objstore/: s3:// and gs://, read and written; docs/s3.md) joins the
// core through the storage layer's table of schemes (store/store.h install_object_store), and
// nowhere else: its clients (objstore/s3.h, objstore/gcs.h) are ObjectStores, which the core reads
// as files and folders and writes through uploads (store/upload.h) without asking which they are.
// Only this module reaches libcurl (dlopen'd on the first request, objstore/curl_api.h) and expat.
// A build without it (-DDCPCTL_WITH_OBJSTORE=OFF) refuses an s3:// or gs:// path with exit 5
// saying how to build it.
#pragma once

namespace dcpctl {

// Installs the s3 and gs clients' makers; once (a second call does nothing). Before the first
// path is read.
void register_objstore();

}  // namespace dcpctl
