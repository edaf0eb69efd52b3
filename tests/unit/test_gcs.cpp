// The GCS client's pure parts (objstore/gcs.h): configuration from Google's variables, objects.list
// pages, object metadata and error bodies, the temporary prefix of a composite upload and its
// composition plan. Requests against a real emulator (fake-gcs-server): tests/gcs/.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "objstore/gcs.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::gcs;

namespace {

Config load(const std::map<std::string, std::string>& env) {
  return Config::load([&](const char* n) -> std::optional<std::string> {
    auto it = env.find(n);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

}  // namespace

TEST_CASE("gcs config: Google's endpoint, the emulator, another endpoint, attempts", "[gcs]") {
  Config c = load({});
  CHECK(c.endpoint == "https://storage.googleapis.com");
  CHECK_FALSE(c.emulator);
  CHECK(c.max_attempts == 5);

  c = load({{"STORAGE_EMULATOR_HOST", "127.0.0.1:4443"}});
  CHECK(c.endpoint == "http://127.0.0.1:4443");
  CHECK(c.emulator);
  c = load({{"STORAGE_EMULATOR_HOST", "https://emu.local:9/"}, {"DCPCTL_GCS_ENDPOINT", "https://other"}});
  CHECK(c.endpoint == "https://emu.local:9");  // the emulator wins, its trailing '/' dropped
  CHECK(c.emulator);

  c = load({{"DCPCTL_GCS_ENDPOINT", "http://127.0.0.1:8080/"}});
  CHECK(c.endpoint == "http://127.0.0.1:8080");
  CHECK_FALSE(c.emulator);  // credentials are still sent
  CHECK_THROWS_AS(load({{"DCPCTL_GCS_ENDPOINT", "127.0.0.1:8080"}}), UsageError);

  CHECK(load({{"AWS_MAX_ATTEMPTS", "3"}}).max_attempts == 3);
  CHECK(load({{"AWS_MAX_ATTEMPTS", "3"}, {"GCS_MAX_ATTEMPTS", "7"}}).max_attempts == 7);
  CHECK_THROWS_AS(load({{"GCS_MAX_ATTEMPTS", "0"}}), UsageError);
  CHECK_THROWS_AS(load({{"GCS_MAX_ATTEMPTS", "many"}}), UsageError);
  CHECK_THROWS_AS(load({{"GCS_MAX_ATTEMPTS", "101"}}), UsageError);
}

TEST_CASE("gcs listings: items, prefixes, page tokens, and anything else an error, never empty", "[gcs]") {
  const std::string url = "gs://b/p/";
  ListPage p = parse_list_page(
      R"({"kind":"storage#objects","items":[{"name":"p/.metadata","size":"1234"},{"name":"p/__0_0.distcp","size":5}],)"
      R"("prefixes":["p/sub/"],"nextPageToken":"tok"})",
      url);
  REQUIRE(p.objects.size() == 2);
  CHECK(p.objects[0] == std::make_pair(std::string("p/.metadata"), uint64_t{1234}));  // GCS: a decimal string
  CHECK(p.objects[1].second == 5);                                                    // a number, as some emulators
  CHECK(p.prefixes == std::vector<std::string>{"p/sub/"});
  CHECK(p.next_token == "tok");

  p = parse_list_page(R"({"kind":"storage#objects"})", url);  // an empty folder: no items key at all
  CHECK(p.objects.empty());
  CHECK(p.prefixes.empty());
  CHECK(p.next_token.empty());
  CHECK(parse_list_page(R"({"nextPageToken":null})", url).next_token.empty());

  for (const char* bad :
       {"", "not json", "[]", R"({"items":{}})", R"({"items":[{"size":"1"}]})", R"({"items":[{"name":"a"}]})",
        R"({"items":[{"name":"a","size":"-1"}]})", R"({"items":[{"name":"a","size":"1e3"}]})", R"({"prefixes":[1]})",
        R"({"nextPageToken":3})"}) {
    INFO(bad);
    try {
      parse_list_page(bad, url);
      FAIL("accepted");
    } catch (const IoError& e) {
      CHECK(std::string(e.what()).find(url) != std::string::npos);
    }
  }
}

TEST_CASE("gcs object metadata and error bodies", "[gcs]") {
  CHECK(parse_object_size(R"({"size":"18446744073709551615"})", "gs://b/k") == UINT64_MAX);
  CHECK(parse_object_size(R"({"name":"k","size":0})", "gs://b/k") == 0);
  CHECK_THROWS_AS(parse_object_size(R"({"name":"k"})", "gs://b/k"), IoError);
  CHECK_THROWS_AS(parse_object_size(R"({"size":"18446744073709551616"})", "gs://b/k"), IoError);
  CHECK_THROWS_AS(parse_object_size("<html>", "gs://b/k"), IoError);

  auto [reason, message] = parse_error_body(
      R"({"error":{"code":403,"message":"sa@p.iam does not have storage.objects.get access","errors":[{"reason":"forbidden"}]}})");
  CHECK(reason == "forbidden");
  CHECK(message == "sa@p.iam does not have storage.objects.get access");
  CHECK(parse_error_body(R"({"error":{"code":404,"message":"Not Found"}})") ==
        std::make_pair(std::string(), std::string("Not Found")));
  CHECK(parse_error_body("Not Found") == std::pair<std::string, std::string>{});
  CHECK(parse_error_body(R"({"error":"x"})") == std::pair<std::string, std::string>{});
}

TEST_CASE("gcs composite uploads: the temporary prefix beside the object, the composition plan", "[gcs]") {
  CHECK(parts_prefix({"gs", "b", "out/model.safetensors"}, "abc") == "out/.model.safetensors.dcpctl-upload-abc/");
  CHECK(parts_prefix({"gs", "b", "model.safetensors"}, "abc") == ".model.safetensors.dcpctl-upload-abc/");
  CHECK(parts_prefix({"gs", "b", "a/b/c/.metadata"}, "0f") == "a/b/c/..metadata.dcpctl-upload-0f/");
  // and back, from a part's key to its object and upload
  for (const char* key : {"out/model.safetensors", "model.safetensors", "a/b/c/.metadata"}) {
    auto u = upload_of_part(parts_prefix({"gs", "b", key}, "0f") + "00001");
    REQUIRE(u);
    CHECK(u->first == key);
    CHECK(u->second == "0f");
  }
  CHECK(!upload_of_part("out/model.safetensors"));
  CHECK(!upload_of_part("out/.dcpctl-upload-0f/00001"));  // no object name: not one of ours
  CHECK(!upload_of_part("out/.x.dcpctl-upload-/00001"));

  // One part, 32, 33, 1024, 1025: every part composed once, each request at most 32 sources, the
  // last level one request, each level's groups covering the level below in order.
  for (size_t n : {1, 2, 31, 32, 33, 64, 65, 1024, 1025, 10000}) {
    INFO(n);
    auto levels = compose_levels(n, 32);
    REQUIRE(!levels.empty());
    CHECK(levels.back().size() == 1);
    size_t below = n;
    for (const auto& level : levels) {
      size_t next = 0;
      for (const auto& g : level) {
        CHECK(!g.empty());
        CHECK(g.size() <= 32);
        for (size_t i : g) CHECK(i == next++);
      }
      CHECK(next == below);  // each of the level below exactly once, in order
      below = level.size();
    }
  }
  CHECK(compose_levels(32, 32).size() == 1);
  CHECK(compose_levels(33, 32).size() == 2);
  CHECK(compose_levels(1024, 32).size() == 2);
  CHECK(compose_levels(1025, 32).size() == 3);
  CHECK(compose_levels(10000, 32).size() == 3);
}
