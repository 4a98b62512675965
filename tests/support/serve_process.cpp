// See serve_process.h.
#include "tests/support/serve_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/support/process.h"
#include "tests/support/test_data.h"

namespace qrun::test {

using Json = nlohmann::json;
using namespace std::chrono_literals;

ServeProcess::ServeProcess(std::vector<std::string> args, const std::vector<std::string>& env) {
  log_ = temp_dir() / "serve.log";
  args.insert(args.begin(), {qrun_binary().string(), "serve", "--port", "0", "-t", "1"});
  pid_ = fork();
  if (pid_ == 0) {
    const int err = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(err, 2);
    for (const std::string& e : env) {
      const size_t eq = e.find('=');
      setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const std::regex address("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string text = log();
    if (std::regex_search(text, m, address)) {
      port_ = std::stoi(m[1].str());
      return;
    }
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      exited_ = true;
      return;
    }
    std::this_thread::sleep_for(20ms);
  }
}

std::string ServeProcess::log() const {
  std::ifstream in(log_);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

httplib::Client ServeProcess::client() const {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(5s);
  c.set_read_timeout(60s);
  c.set_write_timeout(10s);
  return c;
}

int ServeProcess::stop(std::chrono::milliseconds timeout) {
  if (exited_ || pid_ <= 0) return exited_ && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      exited_ = true;
      return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status_, 0);
  exited_ = true;
  return -1;
}

std::string shared_model(const std::string& name) {
  return data_path("models/" + name).string();
}

Json greedy_run(const std::string& model_path, const std::string& prompt, int n,
                const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {
      qrun_binary().string(), "run",    "-m", model_path, "-p",     prompt, "-n",
      std::to_string(n),      "--temp", "0",  "-q",       "--json", "-t",   "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const ProcessResult r = run_process(argv, StdinKind::kDevNull, "", 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Json::parse(r.out, nullptr, false);
}

Json post(httplib::Client& c, const std::string& path, const Json& body, int expect_status) {
  const httplib::Result r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response to " << path << ": " << httplib::to_string(r.error());
  if (!r) return Json();
  EXPECT_EQ(r->status, expect_status) << r->body;
  return Json::parse(r->body, nullptr, false);
}

Events parse_sse(const std::string& body) {
  Events e;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      e.done = true;
      EXPECT_EQ(end + 2, body.size()) << "data after [DONE]";
      break;
    }
    e.chunks.push_back(Json::parse(data));
  }
  return e;
}

std::string streamed_text(const std::string& body) {
  std::string text;
  for (const Json& chunk : parse_sse(body).chunks) {
    if (chunk["choices"].empty()) continue;
    const Json& choice = chunk["choices"][0];
    text += choice.contains("delta") ? choice["delta"].value("content", "")
                                     : choice["text"].get<std::string>();
  }
  return text;
}

std::filesystem::path roles_template() {
  const std::filesystem::path path = temp_dir() / "roles.jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  return path;
}

void expect_error(const httplib::Result& r, int status, const std::string& param,
                  const std::string& needle) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const Json j = Json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.contains("error")) << r->body;
  const Json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("code"));
  if (param.empty())
    EXPECT_TRUE(e["param"].is_null()) << r->body;
  else
    EXPECT_EQ(e["param"], param) << r->body;
  EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << r->body;
}

}  // namespace qrun::test
