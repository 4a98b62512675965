// Conversation (core/conversation.h) on stories260K with a small template: turns reuse the
// cached prefix and give the same greedy reply as a cold cache; the context policies drop
// whole exchanges (or refuse) as documented; JSON save/load round-trips; undo/regen edit
// the messages; prefill rebuilds the cache after a load; end-of-turn tokens are found.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/conversation.h"
#include "core/gguf/gguf.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

constexpr const char* kTemplate =
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

class ConversationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<gguf::File> f = gguf::File::open(test::data_path("models/stories260K.gguf").string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::make_unique<gguf::File>(std::move(f.value()));
    Result<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(t.ok()) << t.error().message;
    tokenizer_ = std::move(t.value());
    Result<std::unique_ptr<Model>> m = models::load_model(*file_, ModelOptions{64});
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = std::move(m.value());
  }

  Conversation make() {
    Result<ChatTemplate> t = ChatTemplate::parse(kTemplate, "test.jinja");
    EXPECT_TRUE(t.ok());
    return Conversation(*tokenizer_, std::move(t.value()));
  }

  KvCache cache(int64_t n_ctx) {
    Result<KvCache> kv = make_kv_cache(*model_, n_ctx, DType::kF16);
    EXPECT_TRUE(kv.ok());
    return std::move(kv.value());
  }

  TurnResult respond(Conversation& c, KvCache& kv, int64_t n_predict = 8) {
    Sampler sampler = make_sampler(SamplingParams{.temperature = 0.0f});
    TurnOptions o;
    o.generate.n_predict = n_predict;
    o.generate.n_batch = 64;
    const std::vector<bool> eot = end_of_turn_tokens(*tokenizer_, c.chat_template());
    o.is_eog = [eot](int32_t t) { return eot[static_cast<size_t>(t)]; };
    Result<TurnResult> r = c.respond(*model_, backend_, kv, sampler, o);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? std::move(r.value()) : TurnResult{};
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Model> model_;
  kernels::CpuBackend backend_{2};
};

TEST_F(ConversationTest, TurnsReuseTheCachedPrefixAndMatchAColdCache) {
  Conversation c = make();
  c.set_system_prompt("You tell stories.");
  KvCache kv = cache(512);
  c.add_message("user", "Once upon a time");
  const TurnResult first = respond(c, kv);
  EXPECT_EQ(first.n_reused, 0);
  EXPECT_EQ(first.n_fed, first.n_prompt);
  EXPECT_GT(first.generation.timings.n_gen, 0);
  ASSERT_EQ(c.messages().size(), 2u);
  EXPECT_EQ(c.messages()[1].role, "assistant");
  EXPECT_EQ(c.messages()[1].content, first.reply);
  EXPECT_EQ(static_cast<int64_t>(c.kv_tokens().size()), kv.n_tokens());

  c.add_message("user", "Tell me about a cat");
  Result<std::vector<int32_t>> tokens = c.tokenize(true);
  ASSERT_TRUE(tokens.ok());
  const int64_t expected_reuse = common_prefix(c.kv_tokens(), *tokens);
  const TurnResult second = respond(c, kv);
  EXPECT_EQ(second.n_reused, expected_reuse);
  EXPECT_GT(second.n_reused, first.n_prompt / 2);  // the system prompt and first exchange
  EXPECT_EQ(second.n_fed, second.n_prompt - second.n_reused);
  EXPECT_EQ(static_cast<int64_t>(c.kv_tokens().size()), kv.n_tokens());

  // The same turn on a cold cache gives the same greedy reply.
  Conversation cold = make();
  cold.set_system_prompt("You tell stories.");
  for (size_t i = 0; i + 1 < c.messages().size(); ++i)
    cold.add_message(c.messages()[i].role, c.messages()[i].content);
  KvCache kv2 = cache(512);
  const TurnResult again = respond(cold, kv2);
  EXPECT_EQ(again.n_reused, 0);
  EXPECT_EQ(again.reply, second.reply);
  EXPECT_EQ(again.generation.tokens, second.generation.tokens);
}

TEST_F(ConversationTest, ContextPolicies) {
  auto fill = [&](Conversation& c) {
    c.set_system_prompt("Be brief.");
    for (int i = 0; i < 6; ++i) {
      c.add_message("user", "The little dog ran to the park number " + std::to_string(i));
      c.add_message("assistant", "The dog was happy and played with a ball all day.");
    }
    c.add_message("user", "What next?");
  };
  Conversation full = make();
  fill(full);
  Result<std::vector<int32_t>> all = full.tokenize(true);
  ASSERT_TRUE(all.ok());
  const int64_t n_all = static_cast<int64_t>(all->size());
  const int64_t n_ctx = n_all / 2;

  // error: refused, nothing changed.
  Result<TurnPlan> refused = full.plan_turn(n_ctx, ContextPolicy::kError, 8);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kContextOverflow);
  EXPECT_EQ(full.messages().size(), 13u);
  // Fits: nothing dropped, whatever the policy.
  Result<TurnPlan> roomy = full.plan_turn(n_all + 8, ContextPolicy::kError, 8);
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy->n_dropped, 0);

  // drop-oldest: whole exchanges go from the front until it fits; the system prompt stays.
  Result<TurnPlan> dropped = full.plan_turn(n_ctx, ContextPolicy::kDropOldest, 8);
  ASSERT_TRUE(dropped.ok()) << dropped.error().message;
  EXPECT_GT(dropped->n_dropped, 0);
  EXPECT_EQ(dropped->n_dropped % 2, 0);
  EXPECT_LE(static_cast<int64_t>(dropped->tokens.size()) + 8, n_ctx);
  EXPECT_EQ(full.messages().size(), 13u - static_cast<size_t>(dropped->n_dropped));
  EXPECT_EQ(full.messages().front().role, "user");
  EXPECT_EQ(full.messages().back().content, "What next?");
  EXPECT_EQ(full.system_prompt(), "Be brief.");

  // shift: drops down to half the context, so more goes at once.
  Conversation shifted = make();
  fill(shifted);
  Result<TurnPlan> shift = shifted.plan_turn(n_ctx, ContextPolicy::kShift, 8);
  ASSERT_TRUE(shift.ok()) << shift.error().message;
  EXPECT_LE(static_cast<int64_t>(shift->tokens.size()) + 8, n_ctx / 2);
  EXPECT_GT(shift->n_dropped, dropped->n_dropped);

  // A last message that cannot fit even alone is refused by every policy.
  Conversation huge = make();
  huge.add_message("user", std::string(4000, 'a'));
  for (ContextPolicy p : {ContextPolicy::kDropOldest, ContextPolicy::kShift}) {
    Result<TurnPlan> r = huge.plan_turn(64, p, 8);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kContextOverflow);
  }
  EXPECT_EQ(parse_context_policy("shift"), ContextPolicy::kShift);
  EXPECT_EQ(parse_context_policy("drop-oldest"), ContextPolicy::kDropOldest);
  EXPECT_FALSE(parse_context_policy("drop").has_value());
}

TEST_F(ConversationTest, DropOldestDuringARealTurnKeepsTheCacheInStep) {
  Conversation c = make();
  KvCache kv = cache(96);
  for (int i = 0; i < 6; ++i) {
    c.add_message("user", "Tom had a red ball " + std::to_string(i));
    const TurnResult t = respond(c, kv, 6);
    EXPECT_EQ(static_cast<int64_t>(c.kv_tokens().size()), kv.n_tokens());
    EXPECT_LE(t.n_prompt + 6, kv.n_ctx() + 6);
  }
  EXPECT_LT(c.messages().size(), 12u);  // something was dropped
}

// A template without a system role (Gemma 2's) gets the system prompt in the first user
// message, as llama.cpp's chat puts it, where rendering it would raise.
TEST_F(ConversationTest, SystemPromptJoinsTheFirstMessageWhereTheTemplateTakesNone) {
  Result<ChatTemplate> t = ChatTemplate::parse(
      test::read_text(test::data_path("templates/google-gemma-2-2b-it.jinja")), "gemma2.jinja");
  ASSERT_TRUE(t.ok()) << t.error().message;
  Conversation c(*tokenizer_, std::move(t.value()));
  c.set_system_prompt("Be brief.");
  c.add_message("user", "Hi");
  Result<std::string> text = c.render(true);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(*text, "<s><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n");
}

TEST_F(ConversationTest, SaveLoadRoundTrip) {
  Conversation c = make();
  c.set_system_prompt("Sys \"quoted\"\nline");
  c.add_message("user", "héllo");
  c.add_message("assistant", "hi\tthere");
  const nlohmann::ordered_json j = c.to_json();
  Conversation d = make();
  ASSERT_TRUE(d.load_json(nlohmann::ordered_json::parse(j.dump()), "conv.json").ok());
  EXPECT_EQ(d.system_prompt(), c.system_prompt());
  ASSERT_EQ(d.messages().size(), 2u);
  EXPECT_EQ(d.messages()[0].content, "héllo");
  EXPECT_EQ(d.messages()[1].role, "assistant");
  EXPECT_EQ(d.to_json().dump(), j.dump());

  // A leading system message is the system prompt.
  Conversation e = make();
  ASSERT_TRUE(
      e.load_json(nlohmann::ordered_json::parse(R"({"messages":[{"role":"system","content":"S"},)"
                                                R"({"role":"user","content":"U"}]})"),
                  "x.json")
          .ok());
  EXPECT_EQ(e.system_prompt(), "S");
  ASSERT_EQ(e.messages().size(), 1u);

  // Bad input names the origin and changes nothing.
  Result<void> bad =
      e.load_json(nlohmann::ordered_json::parse(R"({"messages":[{"role":1}]})"), "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kFormat);
  EXPECT_NE(bad.error().message.find("bad.json"), std::string::npos);
  EXPECT_EQ(e.messages().size(), 1u);
  EXPECT_FALSE(e.load_json(nlohmann::ordered_json::array(), "arr.json").ok());
}

TEST_F(ConversationTest, PrefillAfterLoadThenTheNextTurnReusesIt) {
  Conversation c = make();
  c.set_system_prompt("Stories.");
  c.add_message("user", "A cat");
  c.add_message("assistant", "The cat sat on the mat.");
  KvCache kv = cache(512);
  Result<int64_t> fed = c.prefill(*model_, backend_, kv, 64);
  ASSERT_TRUE(fed.ok()) << fed.error().message;
  Result<std::vector<int32_t>> rendered = c.tokenize(false);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(*fed, static_cast<int64_t>(rendered->size()));
  EXPECT_EQ(kv.n_tokens(), *fed);
  // Prefilling again feeds nothing.
  Result<int64_t> again = c.prefill(*model_, backend_, kv, 64);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  c.add_message("user", "And then?");
  const TurnResult t = respond(c, kv);
  EXPECT_EQ(t.n_reused, *fed);
  // Too small a cache is an overflow error.
  KvCache tiny = cache(8);
  Conversation d = make();
  d.add_message("user", "A long message that needs more than eight tokens for sure");
  Result<int64_t> overflow = d.prefill(*model_, backend_, tiny, 64);
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.error().code, ErrorCode::kContextOverflow);
}

TEST_F(ConversationTest, UndoAndRegen) {
  Conversation c = make();
  EXPECT_EQ(c.undo(), 0);
  EXPECT_FALSE(c.drop_last_reply());
  c.add_message("user", "a");
  c.add_message("assistant", "b");
  c.add_message("user", "c");
  EXPECT_FALSE(c.drop_last_reply());  // the last one is the user's
  c.add_message("assistant", "d");
  EXPECT_TRUE(c.drop_last_reply());
  ASSERT_EQ(c.messages().size(), 3u);
  EXPECT_EQ(c.undo(), 1);  // "c"
  EXPECT_EQ(c.undo(), 2);  // "a", "b"
  EXPECT_TRUE(c.messages().empty());

  // Regenerating a reply on the same cache gives the same greedy text.
  KvCache kv = cache(512);
  c.add_message("user", "Lily went");
  const TurnResult first = respond(c, kv);
  ASSERT_TRUE(c.drop_last_reply());
  const TurnResult regen = respond(c, kv);
  EXPECT_EQ(regen.reply, first.reply);
  EXPECT_EQ(regen.n_reused, first.n_prompt - 1);
}

TEST_F(ConversationTest, EndOfTurnTokens) {
  Conversation c = make();
  const std::vector<bool> eot = end_of_turn_tokens(*tokenizer_, c.chat_template());
  ASSERT_EQ(eot.size(), static_cast<size_t>(tokenizer_->n_vocab()));
  EXPECT_TRUE(eot[static_cast<size_t>(tokenizer_->eos())]);
  EXPECT_FALSE(eot[static_cast<size_t>(tokenizer_->bos())]);
  EXPECT_EQ(common_prefix(std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{1, 2, 4}), 2);
  EXPECT_EQ(common_prefix(std::vector<int32_t>{}, std::vector<int32_t>{1}), 0);
}

// The phi-3 vocabulary and its own template: <|end|> ends a turn (and <|endoftext|>, the
// EOS), <|user|> and <|assistant|> open turns and do not.
TEST(ConversationEndOfTurn, Phi3MarkersAreTokens) {
  Result<gguf::File> f = gguf::File::open(test::data_path("vocab/ggml-vocab-phi-3.gguf").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  Result<ChatTemplate> tmpl = ChatTemplate::from_gguf(*f, "phi-3");
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  const std::vector<bool> eot = end_of_turn_tokens(**tok, *tmpl);
  auto id_of = [&](const std::string& text) {
    const std::vector<int32_t> ids = (*tok)->encode(text, false, true);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? 0 : ids[0];
  };
  EXPECT_TRUE(eot[static_cast<size_t>(id_of("<|end|>"))]);
  EXPECT_TRUE(eot[static_cast<size_t>((*tok)->eos())]);
  EXPECT_FALSE(eot[static_cast<size_t>(id_of("<|user|>"))]);
  EXPECT_FALSE(eot[static_cast<size_t>(id_of("<|assistant|>"))]);
  EXPECT_LT(std::count(eot.begin(), eot.end(), true), 10);
}

}  // namespace
}  // namespace qrun
