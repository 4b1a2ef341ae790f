package rmqdumptest;

import java.io.File;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;

/**
 * What a consumer's pull gets from a store after the broker's restart (a test helper of rmqdump, not shipped).
 *
 * usage: PullAt STORECOPY COMMITLOG_FILE_SIZE CQ_FILE_SIZE SLOTS ENTRIES TOPIC QUEUE_ID OFFSET [OFFSET...]
 * Loads the copy with DefaultMessageStore (the broker's recovery, 5.3.3 defaults otherwise), starts it, and for
 * each OFFSET calls getMessage(group, TOPIC, QUEUE_ID, OFFSET, 32, no filter), the call a pull request ends in.
 * Prints one JSON line per OFFSET: status, nextBeginOffset, and each served message's queue offset and physical
 * offset. Runs on a throw-away copy: load() may truncate, start() writes.
 */
public class PullAt {
    public static void main(String[] a) throws Exception {
        File root = new File(a[0]).getAbsoluteFile();
        DefaultMessageStore store = StoreState.store(StoreState.config(root, a, 1), new ConcurrentHashMap<>());
        StoreState.startAndDispatch(store);
        String topic = a[5];
        int queueId = Integer.parseInt(a[6]);
        for (int i = 7; i < a.length; i++) {
            long offset = Long.parseLong(a[i]);
            GetMessageResult r = store.getMessage("rmqdump-test", topic, queueId, offset, 32, null);
            StringBuilder sb = new StringBuilder();
            sb.append("{\"offset\": ").append(offset).append(", \"status\": \"").append(r.getStatus())
                .append("\", \"nextBeginOffset\": ").append(r.getNextBeginOffset()).append(", \"messages\": [");
            List<Long> qo = r.getMessageQueueOffset();
            List<SelectMappedBufferResult> bufs = r.getMessageMapedList();
            for (int k = 0; k < bufs.size(); k++) {
                if (k > 0) sb.append(", ");
                sb.append('[').append(qo.get(k)).append(", ").append(bufs.get(k).getStartOffset()).append(", ").append(bufs.get(k).getSize()).append(']');
            }
            sb.append("]}");
            System.out.println(sb);
            r.release();
        }
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
