// The S3 client's pure parts (objstore/s3.h): URLs, configuration as the AWS tools read it, listing
// and error XML, listing queries, folders from listings, the retry policy. Requests against real
// servers (moto's, SeaweedFS's): tests/s3/.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "objstore/s3.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::s3;
using namespace dcpctl::store;

namespace {

using Env = std::map<std::string, std::string>;
using Files = std::map<std::string, std::string>;

Config load(const Env& env, const Files& files = {}) {
  return Config::load(
      [&](const char* n) -> std::optional<std::string> {
        auto it = env.find(n);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      },
      [&](const std::string& p) -> std::optional<std::string> {
        auto it = files.find(p);
        return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
      });
}

}  // namespace

TEST_CASE("object URLs: scheme, bucket and key, malformed ones are usage errors") {
  CHECK(is_url("s3://b/k"));
  CHECK(is_url("gs://b/k"));
  CHECK_FALSE(is_url("/tmp/s3://x"));
  CHECK_FALSE(is_url("s3:/b"));
  Location l = parse_url("s3://my-bucket/runs/step-100/__0_0.distcp");
  CHECK(l.bucket == "my-bucket");
  CHECK(l.key == "runs/step-100/__0_0.distcp");
  CHECK(l.url() == "s3://my-bucket/runs/step-100/__0_0.distcp");
  CHECK(parse_url("s3://bkt").key.empty());
  CHECK(parse_url("s3://bkt/").key.empty());
  CHECK(parse_url("s3://bkt/dir/").key == "dir/");
  CHECK_THROWS_AS(parse_url("s3://"), UsageError);
  CHECK_THROWS_AS(parse_url("s3://ab/k"), UsageError);          // bucket names have 3+ characters
  CHECK_THROWS_AS(parse_url("s3://bad bucket/k"), UsageError);  // no blanks
  CHECK_THROWS_AS(parse_url("s3://bkt//k"), UsageError);
  CHECK_THROWS_AS(parse_url("s3://bkt/a//k"), UsageError);
  CHECK_THROWS_AS(parse_url("http://bkt/k"), UsageError);
  Location g = parse_url("gs://my_bucket.example.com/runs/ckpt");
  CHECK(g.scheme == "gs");
  CHECK(g.bucket == "my_bucket.example.com");
  CHECK(g.key == "runs/ckpt");
  CHECK(g.url() == "gs://my_bucket.example.com/runs/ckpt");
  CHECK(l.scheme == "s3");
  CHECK_THROWS_AS(parse_url("gs://bkt//k"), UsageError);
  CHECK_THROWS_AS(parse_url("gs://ab"), UsageError);
}

TEST_CASE("s3 URI encoding: unreserved kept, '/' kept in keys only, the rest %XX upper-case") {
  CHECK(uri_encode("a-b_c.d~e/f", true) == "a-b_c.d~e/f");
  CHECK(uri_encode("a/b", false) == "a%2Fb");
  CHECK(uri_encode("step 1+2=3&x", true) == "step%201%2B2%3D3%26x");
  CHECK(uri_encode("\xc3\xa9", true) == "%C3%A9");
}

TEST_CASE("s3 config: environment keys win over the profile, region and endpoint in order") {
  Config c = load({{"AWS_ACCESS_KEY_ID", "AK"},
                   {"AWS_SECRET_ACCESS_KEY", "SK"},
                   {"AWS_SESSION_TOKEN", "TOK"},
                   {"AWS_REGION", "eu-west-3"},
                   {"AWS_DEFAULT_REGION", "us-west-2"},
                   {"HOME", "/h"}},
                  {{"/h/.aws/credentials", "[default]\naws_access_key_id = FILEAK\naws_secret_access_key = FILESK\n"}});
  CHECK(c.access_key == "AK");
  CHECK(c.secret_key == "SK");
  CHECK(c.session_token == "TOK");
  CHECK(c.region == "eu-west-3");
  CHECK(c.credentials_from == "environment");
  CHECK(c.endpoint.empty());
  CHECK(load({{"AWS_DEFAULT_REGION", "us-west-2"}}).region == "us-west-2");
  CHECK(load({}).region == "us-east-1");
  // Only one of the pair in the environment: the files are read instead.
  Config half = load({{"AWS_ACCESS_KEY_ID", "AK"}, {"HOME", "/h"}},
                     {{"/h/.aws/credentials", "[default]\naws_access_key_id=F\naws_secret_access_key=G\n"}});
  CHECK(half.access_key == "F");
  CHECK(half.secret_key == "G");
  CHECK(load({{"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}}).endpoint == "http://127.0.0.1:9000");
  CHECK(load({{"AWS_ENDPOINT_URL", "http://a:1"}, {"AWS_ENDPOINT_URL_S3", "http://b:2"}}).endpoint == "http://b:2");
  CHECK(load({{"AWS_ENDPOINT_URL", "minio.example:9000"}}).endpoint == "https://minio.example:9000");
  CHECK(load({{"AWS_MAX_ATTEMPTS", "3"}}).max_attempts == 3);
  CHECK_THROWS_AS(load({{"AWS_MAX_ATTEMPTS", "0"}}), UsageError);
  CHECK_THROWS_AS(load({{"AWS_MAX_ATTEMPTS", "x"}}), UsageError);
}

TEST_CASE("s3 config: AWS_PROFILE in the credentials file and in the config file's [profile NAME]") {
  const std::string creds =
      "# comment\n"
      "[default]\n"
      "aws_access_key_id = DEFAK\n"
      "aws_secret_access_key = DEFSK\n"
      "\n"
      "[train]\n"
      "AWS_Access_Key_Id=TRAK\n"
      "aws_secret_access_key=TRSK\n"
      "aws_session_token = TRTOK\n";
  const std::string config =
      "[default]\nregion = us-east-2\n"
      "[profile train]\n"
      "region = ap-south-1\n"
      "endpoint_url = http://store.local:9000\n"
      "s3 =\n"
      "  addressing_style = path\n"
      "  region = nested-ignored\n"
      "max_attempts = 7\n"
      "[profile keys-here]\n"
      "aws_access_key_id = CFGAK\n"
      "aws_secret_access_key = CFGSK\n";
  Files files{{"/home/u/.aws/credentials", creds}, {"/home/u/.aws/config", config}};
  Config def = load({{"HOME", "/home/u"}}, files);
  CHECK(def.access_key == "DEFAK");
  CHECK(def.region == "us-east-2");
  CHECK(def.credentials_from == "/home/u/.aws/credentials [default]");
  Config tr = load({{"HOME", "/home/u"}, {"AWS_PROFILE", "train"}}, files);
  CHECK(tr.access_key == "TRAK");
  CHECK(tr.secret_key == "TRSK");
  CHECK(tr.session_token == "TRTOK");
  CHECK(tr.region == "ap-south-1");
  CHECK(tr.endpoint == "http://store.local:9000");
  CHECK(tr.max_attempts == 7);
  Config kh = load({{"HOME", "/home/u"}, {"AWS_PROFILE", "keys-here"}}, files);
  CHECK(kh.access_key == "CFGAK");
  CHECK(kh.region == "us-east-1");  // a profile without region
  // The files' paths from the environment.
  Config moved = load(
      {{"AWS_SHARED_CREDENTIALS_FILE", "/etc/c"}, {"AWS_CONFIG_FILE", "/etc/f"}},
      {{"/etc/c", "[default]\naws_access_key_id=X\naws_secret_access_key=Y\n"}, {"/etc/f", "[default]\nregion=r1\n"}});
  CHECK(moved.access_key == "X");
  CHECK(moved.region == "r1");
  // No keys anywhere: empty (the first request says so, naming the URL).
  Config none = load({{"HOME", "/nowhere"}, {"AWS_PROFILE", "missing"}}, files);
  CHECK(none.access_key.empty());
}

TEST_CASE("s3 addressing: path-style with an endpoint, virtual-hosted on AWS, keys encoded") {
  Config aws = load({{"AWS_REGION", "eu-central-1"}});
  CHECK(aws.object_url({"s3", "bkt", "a b/c.distcp"}) == "https://bkt.s3.eu-central-1.amazonaws.com/a%20b/c.distcp");
  CHECK(aws.object_url({"s3", "my.dotted", "k"}) == "https://s3.eu-central-1.amazonaws.com/my.dotted/k");
  Config local = load({{"AWS_ENDPOINT_URL", "http://127.0.0.1:5000"}});
  CHECK(local.object_url({"s3", "bkt", "x/.metadata"}) == "http://127.0.0.1:5000/bkt/x/.metadata");
  CHECK(local.object_url({"s3", "bkt", ""}) == "http://127.0.0.1:5000/bkt/");
}

TEST_CASE("s3 listing XML: objects, common prefixes, continuation, entities decoded") {
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>bkt</Name><Prefix>run/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>"
      "<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
      "<Contents><Key>run/.metadata</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
      "<ETag>&quot;abc&quot;</ETag><Size>1234</Size><StorageClass>STANDARD</StorageClass></Contents>"
      "<Contents><Key>run/a&amp;b.distcp</Key><Size>18446744073709551615</Size></Contents>"
      "<CommonPrefixes><Prefix>run/step-1/</Prefix></CommonPrefixes>"
      "<NextContinuationToken>tok/+=</NextContinuationToken>"
      "</ListBucketResult>";
  ListPage p = parse_list_page(xml, "s3://bkt/run/");
  REQUIRE(p.objects.size() == 2);
  CHECK(p.objects[0] == std::make_pair(std::string("run/.metadata"), uint64_t(1234)));
  CHECK(p.objects[1].first == "run/a&b.distcp");
  CHECK(p.objects[1].second == UINT64_MAX);
  CHECK(p.prefixes == std::vector<std::string>{"run/step-1/"});
  CHECK(p.truncated);
  CHECK(p.next_token == "tok/+=");
  ListPage empty = parse_list_page("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", "s3://b/x");
  CHECK(empty.objects.empty());
  CHECK_FALSE(empty.truncated);
}

TEST_CASE("s3 listing XML: anything malformed is an error naming the URL, never an empty listing") {
  auto message = [](const std::string& xml) -> std::string {
    try {
      parse_list_page(xml, "s3://bkt/pre/");
    } catch (const IoError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(message("<ListBucketResult><Contents><Key>a</Key>").find("s3://bkt/pre/") != std::string::npos);
  CHECK(message("<ListBucketResult><Contents><Key>a</Key>").find("malformed listing") != std::string::npos);
  CHECK(message("").find("malformed listing") != std::string::npos);
  CHECK(message("<html>Service Unavailable</html>").find("expected ListBucketResult") != std::string::npos);
  CHECK(message("<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>").find("without Key or Size") !=
        std::string::npos);
  CHECK(message("<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>")
            .find("Size '-1'") != std::string::npos);
  CHECK(
      message("<ListBucketResult><Contents><Key>a</Key><Size>99999999999999999999</Size></Contents></ListBucketResult>")
          .find("not a byte count") != std::string::npos);
  CHECK(message("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").find("NextContinuationToken") !=
        std::string::npos);
  CHECK(message("<Error><Code>AccessDenied</Code><Message>no</Message></Error>").find("AccessDenied: no") !=
        std::string::npos);
  // A hostile entity expansion is refused by expat, not expanded.
  CHECK(message("<!DOCTYPE x [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
                "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\"><!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">"
                "<!ENTITY e \"&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;\"><!ENTITY f \"&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;\">"
                "<!ENTITY g \"&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;\"><!ENTITY h \"&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;\">]>"
                "<ListBucketResult><Prefix>&h;</Prefix></ListBucketResult>") != "no error");
}

TEST_CASE("s3 listing XML: SeaweedFS's answer (ETags as escaped quotes, KeyCount last, a key as the token)") {
  // What SeaweedFS 4.48's `weed server -s3` answers (tests/s3/s3_server.py's SeaweedServer).
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>probe</Name><Prefix>many/</Prefix>"
      "<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><Contents><Key>many/step-00000/.metadata</Key>"
      "<ETag>&#34;b201cacf3a3e88cb1e73e2c098231799&#34;</ETag><Size>46279</Size><StorageClass>STANDARD</StorageClass>"
      "<LastModified>2026-11-23T19:46:32Z</LastModified></Contents>"
      "<NextContinuationToken>many/step-00333/.metadata</NextContinuationToken><KeyCount>1000</KeyCount>"
      "</ListBucketResult>";
  ListPage p = parse_list_page(xml, "s3://probe/many/");
  REQUIRE(p.objects.size() == 1);
  CHECK(p.objects[0] == std::make_pair(std::string("many/step-00000/.metadata"), uint64_t(46279)));
  CHECK(p.truncated);
  CHECK(p.next_token == "many/step-00333/.metadata");
}

TEST_CASE("s3 listing query: canonical (sorted, encoded), max-keys only when asked") {
  CHECK(list_query("run/ckpt/", true, "") == "delimiter=%2F&list-type=2&prefix=run%2Fckpt%2F");
  CHECK(list_query("", false, "") == "list-type=2&prefix=");
  CHECK(list_query("a b/", false, "many/step-00333/.metadata", 1) ==
        "continuation-token=many%2Fstep-00333%2F.metadata&list-type=2&max-keys=1&prefix=a%20b%2F");
  CHECK(list_query("x/", true, "t+=", 1000) ==
        "continuation-token=t%2B%3D&delimiter=%2F&list-type=2&max-keys=1000&prefix=x%2F");
}

TEST_CASE("s3 folders: sub-folders sorted by name whatever the server's CommonPrefixes order") {
  // AWS and moto sort CommonPrefixes by the whole prefix, '/' included: "ckpt-old/" < "ckpt.bak/" <
  // "ckpt/" ('-' < '.' < '/'); SeaweedFS by name: "ckpt" < "ckpt-old" < "ckpt.bak". Either way
  // every sub-folder is found (a binary search over the server's order missed "ckpt" on AWS).
  Listing aws{{{"run/.metadata", 7}, {"run/", 0}},
              {"run/ckpt-old/", "run/ckpt.bak/", "run/ckpt/", "run/step 1/", "run/step-1/", "run/step/"}};
  Listing seaweed{{{"run/.metadata", 7}},
                  {"run/ckpt/", "run/ckpt-old/", "run/ckpt.bak/", "run/step/", "run/step 1/", "run/step-1/"}};
  for (const auto& listing : {aws, seaweed}) {
    Folder f = folder_of(listing, "run/");
    CHECK(f.dirs == std::vector<std::string>{"ckpt", "ckpt-old", "ckpt.bak", "step", "step 1", "step-1"});
    for (const char* name : {"ckpt", "ckpt-old", "ckpt.bak", "step", "step 1", "step-1"}) CHECK(f.has_dir(name));
    CHECK_FALSE(f.has_dir("ckp"));
    CHECK_FALSE(f.has_dir("ckpt-"));
    CHECK(f.files == std::map<std::string, uint64_t>{{".metadata", 7}});
  }
  CHECK(folder_of(aws, "run/").marker);  // the "run/" object some tools write as a folder
  CHECK_FALSE(folder_of(seaweed, "run/").marker);
  // The top of a bucket; entries outside the prefix (a server's mistake) are not names.
  Folder top = folder_of({{{"a", 1}, {"x/b", 2}}, {"d/", "d/"}}, "");
  CHECK(top.files == std::map<std::string, uint64_t>{{"a", 1}, {"x/b", 2}});
  CHECK(top.dirs == std::vector<std::string>{"d"});
  CHECK(folder_of({{{"other/a", 1}}, {"other/d/"}}, "run/").files.empty());
  CHECK(folder_of({{{"other/a", 1}}, {"other/d/"}}, "run/").dirs.empty());
}

TEST_CASE("s3 error bodies and small answers") {
  auto [code, msg] = parse_error_body(
      "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated "
      "does not match</Message><RequestId>x</RequestId></Error>");
  CHECK(code == "SignatureDoesNotMatch");
  CHECK(msg == "The request signature we calculated does not match");
  CHECK(parse_error_body("").first.empty());
  CHECK(parse_error_body("not xml").first.empty());
  CHECK(parse_error_body("<ListBucketResult><Code>x</Code></ListBucketResult>").first.empty());
  CHECK(xml_element("<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u-1</UploadId>"
                    "</InitiateMultipartUploadResult>",
                    "UploadId") == std::optional<std::string>("u-1"));
  CHECK_FALSE(xml_element("<X/>", "UploadId"));
}

TEST_CASE("s3 retry policy: what is retried, bounded exponential backoff with full jitter") {
  CHECK(RetryPolicy::retryable(0, ""));  // connection refused, reset, timeout
  CHECK(RetryPolicy::retryable(500, "InternalError"));
  CHECK(RetryPolicy::retryable(503, "SlowDown"));
  CHECK(RetryPolicy::retryable(503, ""));
  CHECK(RetryPolicy::retryable(429, ""));
  CHECK(RetryPolicy::retryable(400, "RequestTimeout"));
  CHECK_FALSE(RetryPolicy::retryable(403, "AccessDenied"));
  CHECK_FALSE(RetryPolicy::retryable(403, "SignatureDoesNotMatch"));
  CHECK_FALSE(RetryPolicy::retryable(404, "NoSuchKey"));
  CHECK_FALSE(RetryPolicy::retryable(400, "InvalidArgument"));
  RetryPolicy p;
  p.base_ms = 100;
  p.cap_ms = 1000;
  CHECK(p.delay_ms(1, 0.0) == 0);
  CHECK(p.delay_ms(1, 0.9999999) == 100);
  CHECK(p.delay_ms(2, 0.9999999) == 200);
  CHECK(p.delay_ms(3, 0.9999999) == 400);
  CHECK(p.delay_ms(4, 0.5) == 400);
  CHECK(p.delay_ms(5, 0.9999999) == 1000);   // capped
  CHECK(p.delay_ms(60, 0.9999999) == 1000);  // no overflow however many attempts
}

TEST_CASE("s3 retry policy: Retry-After on 429/503 is honoured, within a cap") {
  RetryPolicy p;
  p.base_ms = 100;
  p.cap_ms = 1000;
  CHECK(p.delay_ms(1, 0.5, std::nullopt) == p.delay_ms(1, 0.5));
  CHECK(p.delay_ms(1, 0.5, uint64_t{3}) == 3000);                     // longer than the backoff: the server's wait
  CHECK(p.delay_ms(5, 0.9999999, uint64_t{0}) == 1000);               // shorter: the backoff's
  CHECK(p.delay_ms(1, 0.0, uint64_t{3600}) == p.retry_after_cap_ms);  // an hour: capped
}

TEST_CASE("s3 config: static keys give way to the sources the SDKs try before them") {
  const std::string creds = "[default]\naws_access_key_id = DEFAK\naws_secret_access_key = DEFSK\n";
  // Web identity in the environment comes before the credentials file's keys.
  Config wi = load({{"HOME", "/h"}, {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"}, {"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}},
                   {{"/h/.aws/credentials", creds}});
  CHECK(wi.access_key.empty());
  // Environment keys still come first.
  CHECK(load({{"HOME", "/h"},
              {"AWS_ROLE_ARN", "r"},
              {"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"},
              {"AWS_ACCESS_KEY_ID", "A"},
              {"AWS_SECRET_ACCESS_KEY", "S"}})
            .access_key == "A");
  // A role with a source profile, SSO: before the profile's keys.
  CHECK(load({{"HOME", "/h"}}, {{"/h/.aws/credentials", creds + "role_arn = r\nsource_profile = base\n"}})
            .access_key.empty());
  CHECK(load({{"HOME", "/h"}}, {{"/h/.aws/credentials", creds}, {"/h/.aws/config", "[default]\nsso_session = corp\n"}})
            .access_key.empty());
  // credential_process: after the credentials file's keys, before the config file's.
  CHECK(load({{"HOME", "/h"}},
             {{"/h/.aws/credentials", creds}, {"/h/.aws/config", "[default]\ncredential_process = x\n"}})
            .access_key == "DEFAK");
  CHECK(load({{"HOME", "/h"}},
             {{"/h/.aws/config",
               "[default]\ncredential_process = x\naws_access_key_id = C\naws_secret_access_key = S\n"}})
            .access_key.empty());
}
